"""Plain values the reconcilers hand to the datastore, already translated from Kubernetes JSON.

Reconcilers only translate (a pod dict → :class:`PodInfo`); every invariant (Ready, deleting,
selector match, one endpoint per active target port, resync on selector or port change) is the
store's job. These types are also what tests build directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from epp.framework.endpoint import EndpointState
from epp.labels import Selector

__all__ = [
    "ACTIVE_PORTS_ANNOTATION",
    "DatastoreReader",
    "DatastoreWriter",
    "EndpointListener",
    "ModelSpec",
    "ObjectiveSpec",
    "PodInfo",
    "PoolSpec",
    "RewriteRule",
    "RewriteSpec",
    "TargetModel",
]

ACTIVE_PORTS_ANNOTATION = "inference.networking.k8s.io/active-ports"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """An InferencePool (v1 or v1alpha2) or the pool synthesised in standalone mode."""

    name: str
    namespace: str
    selector: Selector
    target_ports: tuple[int, ...]
    api_version: str = "inference.networking.k8s.io/v1"  # or inference.networking.x-k8s.io/v1alpha2
    app_protocol: str = "http"

    @property
    def is_v1alpha2(self) -> bool:
        return self.api_version.startswith("inference.networking.x-k8s.io/")


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the store needs of a Pod."""

    name: str
    namespace: str
    ip: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    ready: bool = False
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class TargetModel:
    name: str
    weight: int | None = None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A v1alpha2 InferenceModel: client model name → criticality and weighted target models."""

    name: str  # object name
    namespace: str
    model_name: str
    criticality: str | None = None  # Critical | Standard | Sheddable | None
    target_models: tuple[TargetModel, ...] = ()
    created: float = 0.0  # creationTimestamp, epoch seconds (older wins on modelName clashes)


@dataclass(frozen=True, slots=True)
class ObjectiveSpec:
    """An InferenceObjective: looked up by object name (header x-gateway-inference-objective)."""

    name: str
    namespace: str
    priority: int | None = None


@dataclass(frozen=True, slots=True)
class RewriteRule:
    """Exact-match model names (empty = generic rule) and weighted rewrite targets."""

    matches: tuple[str, ...]
    targets: tuple[TargetModel, ...]


@dataclass(frozen=True, slots=True)
class RewriteSpec:
    """An InferenceModelRewrite object (v1alpha2)."""

    name: str
    namespace: str
    rules: tuple[RewriteRule, ...]
    created: float = 0.0


EndpointListener = Callable[[Sequence[EndpointState], Sequence[EndpointState]], None]
"""Called with (added, removed) endpoint states after every store change (scrapers subscribe)."""


class DatastoreWriter(Protocol):
    """What reconcilers (and standalone mode) call. All methods are synchronous and idempotent."""

    def set_pool(self, pool: PoolSpec, pods: Sequence[PodInfo] | None = None) -> bool:
        """Store the pool; returns True when the selector or ports changed (a resync is needed).

        When ``pods`` is given the store resyncs against that full list at once.
        """
        ...

    def clear_pool(self) -> None: ...

    def resync_pods(self, pods: Sequence[PodInfo]) -> None:
        """Replace the whole pod set (relist after a 410 or a selector change)."""
        ...

    def upsert_pod(self, pod: PodInfo) -> None: ...

    def remove_pod(self, namespace: str, name: str) -> None: ...

    def set_model(self, model: ModelSpec) -> None: ...

    def remove_model(self, namespace: str, name: str) -> None: ...

    def set_objective(self, objective: ObjectiveSpec) -> None: ...

    def remove_objective(self, namespace: str, name: str) -> None: ...

    def set_rewrite(self, rewrite: RewriteSpec) -> None: ...

    def remove_rewrite(self, namespace: str, name: str) -> None: ...


class DatastoreReader(Protocol):
    """What the request path reads. Cheap: no copies of the endpoint list per call."""

    @property
    def pool(self) -> PoolSpec | None: ...

    @property
    def synced(self) -> bool:
        """True once a pool is set (readiness gate)."""
        ...

    def endpoints(self) -> Sequence[EndpointState]: ...

    def model(self, model_name: str) -> ModelSpec | None:
        """The oldest InferenceModel whose ``modelName`` is ``model_name``."""
        ...

    def objective(self, name: str) -> ObjectiveSpec | None: ...

    def rewrites(self) -> Sequence[RewriteSpec]:
        """All rewrite objects, oldest first (precedence is applied by requestcontrol)."""
        ...
