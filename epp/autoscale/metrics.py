"""The ``wva_*`` gauges that HPA and KEDA scale on (served by ``epp.telemetry.metrics_server``).

Names and labels are upstream WVA's (``variant_name``, ``namespace``, ``accelerator_type``, plus
``controller_instance`` when set): an HPA External metric on ``wva_desired_replicas`` with an
``AverageValue`` target of 1 makes the HPA's replica count equal the gauge. Series live on a
registry this object owns; a variant's series are removed when it disappears or changes
accelerator, so a deleted VA stops steering its HPA.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from epp.autoscale.types import VariantKey

__all__ = ["AutoscalerMetrics"]


class AutoscalerMetrics:
    """Per-variant desired/current/ratio gauges and a decision counter."""

    def __init__(self, registry: CollectorRegistry | None = None, *, controller_instance: str = "") -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._instance = controller_instance
        names = ("variant_name", "namespace", "accelerator_type") + (
            ("controller_instance",) if controller_instance else ()
        )
        r = self.registry
        self.desired = Gauge("wva_desired_replicas", "Desired number of replicas for each variant", names, registry=r)
        self.current = Gauge("wva_current_replicas", "Current number of replicas for each variant", names, registry=r)
        self.ratio = Gauge(
            "wva_desired_ratio",
            "Ratio of the desired number of replicas and the current number of replicas for each variant",
            names,
            registry=r,
        )
        counter_labels = ("variant_name", "namespace", "direction", "reason") + (
            ("controller_instance",) if controller_instance else ()
        )
        self.scaling = Counter(
            "wva_replica_scaling_total", "Total number of replica scaling decisions", counter_labels, registry=r
        )
        self._labels: dict[VariantKey, tuple[str, ...]] = {}

    def _key_labels(self, key: VariantKey, accelerator: str) -> tuple[str, ...]:
        return (key.name, key.namespace, accelerator) + ((self._instance,) if self._instance else ())

    def publish(self, key: VariantKey, *, accelerator: str, desired: int, current: int) -> None:
        """Set the three gauges; the ratio is desired/current, or desired when current is 0."""
        labels = self._key_labels(key, accelerator)
        old = self._labels.get(key)
        if old is not None and old != labels:
            self._remove(old)
        self._labels[key] = labels
        self.desired.labels(*labels).set(desired)
        self.current.labels(*labels).set(current)
        self.ratio.labels(*labels).set(desired / current if current else desired)

    def count(self, key: VariantKey, *, direction: str, reason: str) -> None:
        """Count a decision that changed the target (upstream registers this counter but never uses it)."""
        self.scaling.labels(
            key.name, key.namespace, direction, reason, *((self._instance,) if self._instance else ())
        ).inc()

    def retain(self, keys: Iterable[VariantKey]) -> None:
        """Drop the gauges of every variant not in ``keys``."""
        keep = set(keys)
        for key in [k for k in self._labels if k not in keep]:
            self._remove(self._labels.pop(key))

    def _remove(self, labels: tuple[str, ...]) -> None:
        for gauge in (self.desired, self.current, self.ratio):
            gauge.remove(*labels)
