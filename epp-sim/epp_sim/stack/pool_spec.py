"""What a local stack puts in its fake cluster for one pool, and how the picker is told to serve it.

A pool is served in one of three modes, as a platform team may deploy the picker: ``v1`` (an
``inference.networking.k8s.io`` InferencePool), ``v1alpha2`` (the ``x-k8s.io`` pool, with
InferenceModels), or ``standalone`` (no pool object: ``--endpoint-selector`` picks pods by label).
The spec holds the pool's identity and pod labels, the simulator settings of its pods, the
objects applied with it (objectives, rewrites, models), and optionally the caller's own
InferencePool manifest (``epp dev`` applies the one in ``manifests/samples``), whose target port
is set to the one the simulators share. For disaggregated serving it also holds each pod's
``llm-d.ai/role``, the ``epp sidecar`` flags of the decode pods (None: no sidecars), and the
data-parallel ranks per pod (the pool then lists a target port per rank).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from epp.kube.standalone import standalone_pool_name
from epp_sim.kube_objects import V1_POOL_GROUP, V1ALPHA2_POOL_GROUP, PoolMode, inference_pool
from epp_sim.modelserver import SimConfig

__all__ = ["DEFAULT_POOL", "POOL_MODES", "PoolSpec"]

DEFAULT_POOL = "vllm-llama3-8b-instruct"
POOL_MODES: tuple[PoolMode, ...] = ("v1", "v1alpha2", "standalone")


@dataclass(frozen=True)
class PoolSpec:
    """One pool and its simulated pods; ``labels`` default to ``{"app": name}``.

    ``crds`` None means the inference CRDs shipped with epp-sim. ``pool_manifest`` replaces the
    generated InferencePool (``v1`` and ``v1alpha2`` modes only).
    """

    name: str = DEFAULT_POOL
    namespace: str = "default"
    mode: PoolMode = "v1"
    labels: Mapping[str, str] = field(default_factory=dict)
    sim_config: SimConfig | Sequence[SimConfig] = field(default_factory=lambda: SimConfig(max_loras=4))
    objects: Sequence[Mapping[str, Any]] = ()
    crds: Sequence[Mapping[str, Any]] | None = None
    pool_manifest: Mapping[str, Any] | None = None
    pod_prefix: str = "pod"
    roles: Sequence[str | None] = ()
    """Each pod's ``llm-d.ai/role`` (None: unlabelled); empty: no role labels."""
    sidecar_args: Sequence[str] | None = None
    """``epp sidecar`` flags for the pods whose role serves decode; None: no sidecars."""
    ranks: int = 1

    def __post_init__(self) -> None:
        if self.mode not in POOL_MODES:
            raise ValueError(f"pool mode must be one of {', '.join(POOL_MODES)}, got {self.mode!r}")
        if self.ranks != 1 and self.mode == "v1alpha2":
            raise ValueError("a v1alpha2 pool has one target port: no data-parallel ranks")
        if self.mode == "standalone" and self.pool_manifest is not None:
            raise ValueError("a standalone pool has no InferencePool manifest")
        if not self.labels:
            object.__setattr__(self, "labels", {"app": self.name})

    def pool_object(self, port: int) -> dict[str, Any] | None:
        """The InferencePool to apply (its target port set to ``port``); None in standalone mode."""
        if self.mode == "standalone":
            return None
        if self.pool_manifest is None:
            return inference_pool(self.mode, self.name, self.labels, port, namespace=self.namespace, ranks=self.ranks)
        spec = dict(self.pool_manifest["spec"])
        if self.mode == "v1alpha2":
            spec["targetPortNumber"] = port
        else:
            spec["targetPorts"] = [{"number": port + r} for r in range(self.ranks)]
        return {**self.pool_manifest, "spec": spec}

    def picker_arguments(self, port: int) -> list[str]:
        """The ``epp serve`` flags that select this pool."""
        if self.mode == "standalone":
            selector = ",".join(f"{k}={v}" for k, v in self.labels.items())
            return [
                "--endpoint-selector",
                selector,
                "--endpoint-target-ports",
                ",".join(str(port + r) for r in range(self.ranks)),
                "--pool-namespace",
                self.namespace,
            ]
        group = V1ALPHA2_POOL_GROUP if self.mode == "v1alpha2" else V1_POOL_GROUP
        return ["--pool-name", self.name, "--pool-namespace", self.namespace, "--pool-group", group]

    @property
    def reported_name(self) -> str:
        """The pool name in the picker's own metrics (standalone: taken from the picker's POD_NAME)."""
        return standalone_pool_name(os.environ.get("POD_NAME")) if self.mode == "standalone" else self.name
