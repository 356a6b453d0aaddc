"""Reading Kubernetes manifests: the YAML files epp-sim ships (``manifests/``) and the caller's own.

``MANIFESTS`` is the repository's ``manifests/`` folder, shipped inside this distribution (a link
in the source tree, a copy in the wheel), so the local stack and the hermetic harness find the
CRDs and the sample pool wherever epp-sim is installed. Reads block: call them off the loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["CRDS_DIR", "MANIFESTS", "ManifestError", "read_manifest", "read_manifests"]

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"
CRDS_DIR = MANIFESTS / "crds"


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the file and what is wrong."""


def read_manifest(path: Path) -> list[dict[str, Any]]:
    """Every document of a YAML file; each must have ``kind`` and ``apiVersion``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ManifestError(f"cannot read manifest {path}: {e}") from e
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise ManifestError(f"manifest {path} is not valid YAML: {e}") from e
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d or "apiVersion" not in d:
            raise ManifestError(f"manifest {path} holds a document without kind/apiVersion")
    return docs


def read_manifests(*paths: Path) -> list[dict[str, Any]]:
    """Every document of these files (folders: their ``*.yaml`` but ``kustomization.yaml``, sorted), CRDs first."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(p for p in path.glob("*.yaml") if p.name != "kustomization.yaml") if path.is_dir() else [path]
        for file in files:
            docs.extend(read_manifest(file))
    return sorted(docs, key=lambda d: d.get("kind") != "CustomResourceDefinition")
