"""What ``epp dev`` reads from ``manifests/``: the CRDs, the sample pool and what its pods look like.

Blocking file reads (call these off the loop). The sample Deployment is the single source of the
model name, LoRA slots and pod labels of the simulated pods: hand-made pods copy them, and
``epp dev --autoscale`` applies the Deployment itself so the simulated Deployment controller
creates the pods. A manifest that is missing, not YAML, or lacks a field ``epp dev`` needs raises
:class:`ManifestError` naming the file and the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epp_sim.modelserver.config import SimConfig
from epp_sim.stack.manifests import ManifestError, read_manifest
from epp_sim.stack.pool_spec import PoolSpec

__all__ = [
    "ManifestError",
    "SamplePool",
    "load_pd_config",
    "load_samples",
    "qualified",
]

POOL_GROUP = "inference.networking.k8s.io"


@dataclass(frozen=True, slots=True)
class SamplePool:
    """The objects applied from ``manifests/`` and what the simulated pods must look like."""

    crds: list[dict[str, Any]]
    pool: dict[str, Any]
    deployment: dict[str, Any]
    objectives: list[dict[str, Any]]
    rewrites: list[dict[str, Any]]
    model: str
    adapters: tuple[str, ...]
    max_loras: int
    pod_labels: dict[str, str]

    @property
    def name(self) -> str:
        return str(self.pool["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.pool["metadata"].get("namespace") or "default")

    @property
    def deployment_name(self) -> str:
        return str(self.deployment["metadata"]["name"])

    @property
    def objective_names(self) -> tuple[str, ...]:
        """InferenceObjective names, as clients give them in ``x-gateway-inference-objective``."""
        return tuple(str(o["metadata"]["name"]) for o in self.objectives)

    @property
    def rewritten_models(self) -> tuple[str, ...]:
        """Models clients ask for that a rewrite sends to the adapters (``food-review``)."""
        return tuple(
            dict.fromkeys(
                str(match["model"]["value"])
                for rewrite in self.rewrites
                for rule in rewrite["spec"].get("rules") or []
                for match in rule.get("matches") or []
                if "model" in match
            )
        )

    def sim_config(self, *, time_scale: float = 1.0, **engine: Any) -> SimConfig:
        """The simulator settings of a sample pod: its model and adapters, plus ``engine`` overrides."""
        base = SimConfig(
            model=self.model,
            lora_modules={name: f"/adapters/{name}" for name in self.adapters},
            max_loras=max(1, self.max_loras),
            time_scale=time_scale,
        )
        return dataclasses.replace(base, **engine) if engine else base

    def pool_spec(self, *, time_scale: float = 1.0) -> PoolSpec:
        """The sample pool as a local stack serves it: its manifest, objectives, rewrites and CRDs."""
        return PoolSpec(
            name=self.name,
            namespace=self.namespace,
            mode="v1",
            labels=self.pod_labels,
            sim_config=self.sim_config(time_scale=time_scale),
            objects=[*self.objectives, *self.rewrites],
            crds=self.crds,
            pool_manifest=self.pool,
            pod_prefix=self.name,
        )


def _kustomization_docs(folder: Path) -> list[dict[str, Any]]:
    """Every document of the files a ``kustomization.yaml`` lists, in its order."""
    docs = read_manifest(folder / "kustomization.yaml")
    resources = [name for doc in docs for name in doc.get("resources") or []]
    return [doc for name in resources for doc in read_manifest(folder / str(name))]


def _flag(args: Sequence[object], name: str) -> str | None:
    prefix = f"--{name}="
    for i, arg in enumerate(args):
        text = str(arg)
        if text.startswith(prefix):
            return text[len(prefix) :]
        if text == f"--{name}" and i + 1 < len(args):
            return str(args[i + 1])
    return None


def qualified(doc: Mapping[str, Any]) -> str:
    """``Kind.group`` as the fake API server's store resolves it (core kinds have no group)."""
    group = str(doc["apiVersion"]).rpartition("/")[0]
    return f"{doc['kind']}.{group}" if group else str(doc["kind"])


def load_samples(manifests: Path) -> SamplePool:
    """Read the CRDs and the sample pool from ``manifests`` (blocking: call off the loop)."""
    crds = [d for d in _kustomization_docs(manifests / "crds") if d["kind"] == "CustomResourceDefinition"]
    samples = _kustomization_docs(manifests / "samples")
    try:
        return _sample_pool(crds, samples, manifests / "samples")
    except ManifestError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise ManifestError(f"the sample manifests in {manifests / 'samples'} lack a field epp dev needs: {e!r}") from e


def load_pd_config(manifests: Path) -> str:
    """The picker's P/D configuration of ``manifests/overlays/pd`` (its ConfigMap patch; blocking)."""
    path = manifests / "overlays" / "pd" / "configmap-patch.yaml"
    for doc in read_manifest(path):
        text = ((doc.get("data") or {}) if doc.get("kind") == "ConfigMap" else {}).get("epp-config.yaml")
        if isinstance(text, str):
            return text
    raise ManifestError(f"{path} must hold a ConfigMap with data.epp-config.yaml")


def _sample_pool(crds: list[dict[str, Any]], samples: list[dict[str, Any]], where: Path) -> SamplePool:
    pools = [d for d in samples if d["kind"] == "InferencePool" and d["apiVersion"].startswith(f"{POOL_GROUP}/")]
    deployments = [d for d in samples if d["kind"] == "Deployment"]
    if len(pools) != 1 or len(deployments) != 1:
        raise ManifestError(
            f"{where} must hold exactly one {POOL_GROUP} InferencePool and one Deployment, "
            f"found {len(pools)} and {len(deployments)}"
        )
    pool, deployment = pools[0], deployments[0]
    template = deployment["spec"]["template"]
    container = template["spec"]["containers"][0]
    model = _flag(container.get("args") or [], "model")
    if not model:
        raise ManifestError(f"the sample Deployment's first container has no --model argument: {container.get('args')}")
    pod_labels = {str(k): str(v) for k, v in (template["metadata"].get("labels") or {}).items()}
    selector = pool["spec"]["selector"]["matchLabels"]
    if any(pod_labels.get(k) != v for k, v in selector.items()):
        raise ManifestError(
            f"the sample Deployment's pod labels {pod_labels} do not match the pool selector {selector}"
        )
    rewrites = [d for d in samples if d["kind"] == "InferenceModelRewrite"]
    adapters = tuple(
        dict.fromkeys(
            str(target["modelRewrite"])
            for rewrite in rewrites
            for rule in rewrite["spec"].get("rules") or []
            for target in rule.get("targets") or []
        )
    )
    return SamplePool(
        crds=crds,
        pool=pool,
        deployment=deployment,
        objectives=[d for d in samples if d["kind"] == "InferenceObjective"],
        rewrites=rewrites,
        model=model,
        adapters=adapters,
        max_loras=int(_flag(container.get("args") or [], "max-loras") or 1),
        pod_labels=pod_labels,
    )
