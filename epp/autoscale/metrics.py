"""The ``wva_*`` series: upstream WVA v0.9's names, labels and meanings, on the autoscaler's own registry.

The scaling signal HPA and KEDA read: ``wva_desired_replicas`` (with ``wva_current_replicas`` and
``wva_desired_ratio``), labels ``variant_name`` (the declaring HPA, ScaledObject or VA), ``namespace``
and ``accelerator_type`` — ``unresolved`` when the accelerator is unknown, since the signal is
never withheld (upstream: a scaler matches on name and namespace only). Then what upstream added
around it: per-variant saturation gauges, decision and limiter counters, cycle and collection
timings, configuration info, errors. Every series gets ``controller_instance`` when one is set. A
variant's series go when it does, so a deleted scaler stops steering anything.

Not emitted: ``wva_available_gpus`` (upstream fills it from GPU discovery on Nodes, which this
autoscaler does not do; ``wva_gpu_discovery_up`` says so with 0).

Declared as every area's series are (a series set on the process's
:class:`~epp.telemetry.metrics.EppMetrics`, with :mod:`epp.telemetry.series`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from epp.autoscale.decision import Signals
from epp.autoscale.types import VariantKey
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter, Gauge, GaugeValue, Histogram

__all__ = ["UNRESOLVED", "AutoscalerMetrics"]

UNRESOLVED = "unresolved"
_OPTIMIZERS = ("greedy-by-score", "cost-aware")


class AutoscalerMetrics:
    """Every ``wva_*`` series; methods take the values, labels come from the keys."""

    def __init__(self, metrics: EppMetrics | None = None, *, controller_instance: str = "") -> None:
        self.registry = (metrics if metrics is not None else EppMetrics()).registry
        self._instance = controller_instance
        extra = ("controller_instance",) if controller_instance else ()
        r = self.registry

        def g(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(name, doc, (*labels, *extra), registry=r)

        def c(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, (*labels, *extra), registry=r)

        replica = ("variant_name", "namespace", "accelerator_type")
        self.desired = g("wva_desired_replicas", "Desired number of replicas for each variant", *replica)
        self.current = g("wva_current_replicas", "Current number of replicas for each variant", *replica)
        self.ratio = g(
            "wva_desired_ratio",
            "Ratio of the desired number of replicas and the current number of replicas for each variant",
            *replica,
        )
        self.scaling = c(
            "wva_replica_scaling_total", "Total number of replica scaling operations", "variant_name", "namespace",
            "direction", "reason",
        )  # fmt: skip
        self.errors = c("wva_errors_total", "Total number of errors by component", "component", "error_type")
        self.utilization = g(
            "wva_saturation_utilization",
            "Per-variant utilization ratio (0.0-1.0) from saturation analysis",
            "variant_name", "namespace", "model_name", "accelerator_type",
        )  # fmt: skip
        capacity = ("variant_name", "namespace", "model_name", "unit")
        self.spare = g("wva_spare_capacity", "Spare capacity; >0 indicates safe scale-down headroom", *capacity)
        self.required = g("wva_required_capacity", "Required capacity; >0 indicates scale-up needed", *capacity)
        model = ("variant_name", "namespace", "model_name")
        self.tokens_used = g(
            "wva_kv_cache_tokens_used", "Total KV cache tokens in use across a variant's replicas", *model
        )
        self.tokens_capacity = g(
            "wva_kv_cache_tokens_capacity", "Total KV cache token capacity across a variant's replicas", *model
        )
        self.fresh = g(
            "wva_saturation_metrics_up",
            "1 in cycles where the variant got a fresh decision, 0 when its saturation gauges were not refreshed",
            "variant_name", "namespace",
        )  # fmt: skip
        self.duration = Histogram(
            "wva_optimization_duration_seconds", "Duration of optimization loop cycles in seconds", ("status", *extra),
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r,
        )  # fmt: skip
        self.models = g("wva_models_processed", "Number of models processed in the last optimization cycle")
        self.limited = c(
            "wva_decisions_limited_total", "Total number of decisions limited by the limiter", "variant_name",
            "namespace", "limiter_name",
        )  # fmt: skip
        self.discovery_up = g("wva_gpu_discovery_up", "Indicates whether GPU discovery is on (1) or off (0)")
        self.enforced = c(
            "wva_enforcer_modifications_total",
            "Total number of decision modifications made by the enforcer",
            "policy_type",
        )
        self.optimizer = g("wva_optimizer_active", "1 for active optimizer, 0 for inactive", "optimizer_name")
        self.config_info = g(
            "wva_config_info", "WVA configuration information (value is always 1)", "analyzer_name", "limiter_enabled",
            "scale_to_zero_enabled",
        )  # fmt: skip
        self.kv_spare = g("wva_config_kv_spare_threshold", "Global default KV cache spare threshold")
        self.queue_spare = g("wva_config_queue_spare_threshold", "Global default queue spare threshold")
        self.interval = g("wva_config_optimization_interval_seconds", "Optimization interval in seconds")
        self.collection = Histogram(
            "wva_metrics_collection_duration_seconds", "Duration of metrics collection operations in seconds",
            ("query_type", *extra), buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5), registry=r,
        )  # fmt: skip
        self.collection_errors = c(
            "wva_metrics_collection_errors_total", "Total number of metrics collection errors", "query_type", "reason"
        )
        self.pods = g("wva_metrics_pods_discovered", "Number of pods discovered for metrics collection", "namespace")
        self.freshness = g(
            "wva_metrics_freshness_status", "Freshness status of metrics for each variant", "variant_name", "status"
        )
        self.mapping_miss = c(
            "wva_pod_mapping_miss_total", "Pods whose metrics could not be attributed to a managed scaler", "namespace",
            "reason",
        )  # fmt: skip
        self._plain(self.discovery_up).set(0)
        self._labels: dict[VariantKey, dict[str, Any]] = {}

    def _x(self, *values: str) -> tuple[str, ...]:
        return (*values, *((self._instance,) if self._instance else ()))

    def _plain(self, gauge: Gauge) -> Gauge | GaugeValue:
        """A gauge without labels of its own (one with ``controller_instance`` only when set)."""
        return gauge.labels(self._instance) if self._instance else gauge

    def _track(self, key: VariantKey, gauge: Gauge, labels: tuple[str, ...]) -> None:
        """Remember a variant's series so :meth:`retain` can drop them; a label change drops the old one."""
        seen = self._labels.setdefault(key, {})
        old = seen.get(gauge._name)
        if old is not None and old != labels:
            gauge.remove(*old)
        seen[gauge._name] = labels

    def publish(self, key: VariantKey, *, accelerator: str, desired: int, current: int) -> None:
        """The scaling signal; the ratio is desired/current, or desired when current is 0."""
        labels = self._x(key.name, key.namespace, accelerator or UNRESOLVED)
        for gauge, value in (
            (self.desired, desired),
            (self.current, current),
            (self.ratio, desired / current if current else desired),
        ):
            gauge.labels(*labels).set(value)  # set before the stale series goes: no gap for a scraper
            self._track(key, gauge, labels)

    def saturation(self, key: VariantKey, model: str, accelerator: str, s: Signals | None) -> None:
        """The per-variant saturation gauges (fresh) or only ``wva_saturation_metrics_up`` 0 (stale)."""
        up = self._x(key.name, key.namespace)
        self.fresh.labels(*up).set(1 if s is not None else 0)
        self._track(key, self.fresh, up)
        if s is None:
            return
        if accelerator and accelerator != UNRESOLVED:
            labels = self._x(key.name, key.namespace, model, accelerator)
            self.utilization.labels(*labels).set(s.utilization)
            self._track(key, self.utilization, labels)
        cap = self._x(key.name, key.namespace, model, s.unit)
        for gauge, value in ((self.spare, s.spare), (self.required, s.required)):
            gauge.labels(*cap).set(value)
            self._track(key, gauge, cap)
        per_model = self._x(key.name, key.namespace, model)
        for gauge, value in ((self.tokens_used, s.tokens_used), (self.tokens_capacity, s.tokens_capacity)):
            gauge.labels(*per_model).set(value)
            self._track(key, gauge, per_model)

    def freshness_status(self, key: VariantKey, *, fresh: int, missing: int) -> None:
        for status, count in (("fresh", fresh), ("missing", missing)):
            labels = self._x(key.name, status)
            self.freshness.labels(*labels).set(count)
            self._labels.setdefault(key, {})[f"freshness-{status}"] = labels

    def count(self, key: VariantKey, *, direction: str, reason: str) -> None:
        """A decision that changed the target."""
        self.scaling.labels(*self._x(key.name, key.namespace, direction, reason)).inc()

    def limited_by(self, key: VariantKey, limiter: str) -> None:
        self.limited.labels(*self._x(key.name, key.namespace, limiter)).inc()

    def enforcer(self, policy: str) -> None:
        self.enforced.labels(*self._x(policy)).inc()

    def error(self, component: str, error_type: str) -> None:
        self.errors.labels(*self._x(component, error_type)).inc()

    def collected(self, query_type: str, seconds: float, *, error: str = "") -> None:
        self.collection.labels(*self._x(query_type)).observe(seconds)
        if error:
            self.collection_errors.labels(*self._x(query_type, error)).inc()

    def cycle(self, seconds: float, *, ok: bool, models: int) -> None:
        self.duration.labels(*self._x("success" if ok else "error")).observe(seconds)
        self._plain(self.models).set(models)

    def configuration(self, *, analyzer: str, limiter: bool, scale_to_zero: bool, kv_spare: float,
                      queue_spare: float, interval: float) -> None:  # fmt: skip
        self.config_info.clear()
        self.config_info.labels(*self._x(analyzer, str(limiter).lower(), str(scale_to_zero).lower())).set(1)
        self._plain(self.kv_spare).set(kv_spare)
        self._plain(self.queue_spare).set(queue_spare)
        self._plain(self.interval).set(interval)
        for name in _OPTIMIZERS:
            self.optimizer.labels(*self._x(name)).set(1 if name == "cost-aware" else 0)

    def pods_discovered(self, namespace: str, count: int) -> None:
        self.pods.labels(*self._x(namespace)).set(count)

    def unattributed(self, namespace: str, count: int) -> None:
        if count:
            self.mapping_miss.labels(*self._x(namespace, "unresolved")).inc(count)

    def retain(self, keys: Iterable[VariantKey]) -> None:
        """Drop every series of the variants not in ``keys``."""
        keep = set(keys)
        gauges = {g._name: g for g in (self.desired, self.current, self.ratio, self.utilization, self.spare,
                                       self.required, self.tokens_used, self.tokens_capacity, self.fresh)}  # fmt: skip
        for key in [k for k in self._labels if k not in keep]:
            for name, labels in self._labels.pop(key).items():
                if name.startswith("freshness-"):
                    self.freshness.remove(*labels)
                else:
                    gauges[name].remove(*labels)
