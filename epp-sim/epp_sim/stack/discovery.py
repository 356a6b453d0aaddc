"""A pool without Kubernetes: the endpoints file ``file-discovery`` reads, and a picker configuration naming it.

``epp dev --no-kubernetes`` (and the hermetic tests of that mode) run the picker with no API server:
its configuration's ``dataLayer.discovery`` names a ``file-discovery`` plugin watching a file that
lists the simulated servers in upstream's format, and the default profile's scorers and weights,
as ``epp.config.defaults`` sets them (queue, KV cache, prefix cache, LoRA affinity).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from epp.config.defaults import DEFAULT_PROFILE_NAME, DEFAULT_SCORERS

__all__ = ["discovery_config", "endpoints_file"]


def endpoints_file(servers: Iterable[tuple[str, str, int]], labels: Mapping[str, str] | None = None) -> str:
    """The file's text for ``(name, address, port)`` servers (ports written as strings, as upstream's)."""
    entries = [
        {"name": name, "address": address, "port": str(port), **({"labels": dict(labels)} if labels else {})}
        for name, address, port in servers
    ]
    return yaml.safe_dump({"endpoints": entries}, sort_keys=False)


def discovery_config(path: Path, *, watch: bool = True) -> str:
    """A picker configuration whose endpoints come from the file at ``path``, scored as the default profile."""
    discovery = {"type": "file-discovery", "parameters": {"path": str(path), "watchFile": watch}}
    config = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [discovery, *({"type": t} for t, _ in DEFAULT_SCORERS)],
        "schedulingProfiles": [
            {"name": DEFAULT_PROFILE_NAME, "plugins": [{"pluginRef": t, "weight": w} for t, w in DEFAULT_SCORERS]}
        ],
        "dataLayer": {"discovery": {"pluginRef": "file-discovery"}},
    }
    return yaml.safe_dump(config, sort_keys=False)
