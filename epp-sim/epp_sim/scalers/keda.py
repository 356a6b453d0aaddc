"""A simulated KEDA operator for ``keda.sh/v1alpha1`` ScaledObjects (served from a CRD) in the fake cluster.

What KEDA does with a ScaledObject whose triggers are ``prometheus`` queries, as WVA v0.9 uses it:

- it owns an HPA, ``keda-hpa-<name>`` (or ``advanced.horizontalPodAutoscalerConfig.name``), with
  the ScaledObject's annotations (so WVA sees the same ``llm-d.ai/*`` on both), ``minReplicas`` =
  ``minReplicaCount`` or 1, ``maxReplicas`` = ``maxReplicaCount`` (default 100), the advanced
  ``behavior``, and one External metric per trigger, ``s<i>-prometheus`` selected by
  ``scaledobject.keda.sh/name``, whose target is the trigger's ``threshold`` as an ``AverageValue``
  (or a ``Value`` with ``metricType: Value`` on the trigger, where KEDA reads it);
- it activates and deactivates the workload itself: a trigger value above its
  ``activationThreshold`` (default 0) scales a workload at zero to ``max(1, minReplicaCount)``;
  with ``minReplicaCount: 0``, no active trigger for ``cooldownPeriod`` (default 300 s, after
  ``initialCooldownPeriod``) scales it to zero. In between, the HPA does the scaling;
- its metrics adapter answers the HPA with the trigger query's value, from the stand-in
  Prometheus (``serverAddress`` and TLS settings are not used: there is one stand-in).

Not simulated, and reported on the ScaledObject's ``Ready`` condition when used: triggers other
than ``prometheus``, and ``fallback`` (kept as written, never applied).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Mapping
from typing import Any

from epp.clock import Clock, SystemClock
from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.kinds import Obj
from epp_sim.apiserver.store import Store
from epp_sim.scalers.hpa import AdapterMetrics, MetricError
from epp_sim.scalers.prometheus import PrometheusStandIn, QueryError

__all__ = ["SCALED_OBJECT_LABEL", "ClusterMetrics", "KedaOperator"]

log = logging.getLogger(__name__)

SCALED_OBJECTS = "scaledobjects.keda.sh"
HPAS = "horizontalpodautoscalers.autoscaling"
SCALED_OBJECT_LABEL = "scaledobject.keda.sh/name"
_METRIC = re.compile(r"^s(\d+)-")
_SKIP_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def _time(wall: float) -> str:
    return dt.datetime.fromtimestamp(int(wall), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hpa_name(so: Obj) -> str:
    config = ((so.get("spec") or {}).get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}
    return str(config.get("name") or f"keda-hpa-{so['metadata']['name']}")


class KedaOperator:
    """Reconciles every ScaledObject: its HPA, activation and status; :meth:`sync` once per poll."""

    def __init__(self, store: Store, prometheus: PrometheusStandIn, *, clock: Clock | None = None) -> None:
        self._store = store
        self._prometheus = prometheus
        self._clock = clock or SystemClock()
        self._last_active: dict[tuple[str, str], float] = {}
        self._created: dict[tuple[str, str], float] = {}

    def trigger_value(self, namespace: str, so_name: str, index: int) -> float:
        """The value of a ScaledObject's trigger; raises :class:`MetricError`."""
        so = self._store.lookup(self._store.type_of(SCALED_OBJECTS), so_name, namespace)
        triggers = (so.get("spec") or {}).get("triggers") or [] if so is not None else []
        if not 0 <= index < len(triggers):
            raise MetricError(f"ScaledObject {namespace}/{so_name} has no trigger {index}")
        trigger = triggers[index]
        if trigger.get("type") != "prometheus":
            raise MetricError(f"trigger type {trigger.get('type')!r} is not simulated (prometheus only)")
        try:
            return self._prometheus.query(str((trigger.get("metadata") or {}).get("query") or ""))
        except QueryError as e:
            raise MetricError(str(e)) from e

    async def sync(self) -> None:
        try:
            rt = self._store.type_of(SCALED_OBJECTS)
        except ApiError:
            return  # the CRD is not installed
        live = set()
        for so in self._store.list(rt):
            key = (so["metadata"].get("namespace", ""), so["metadata"]["name"])
            live.add(key)
            try:
                self._one(so)
            except (ApiError, MetricError) as e:
                log.warning("keda reconcile failed", extra={"scaledobject": "/".join(key), "error": str(e)})
        for table in (self._last_active, self._created):
            for key in [k for k in table if k not in live]:
                del table[key]

    def _hpa_spec(self, so: Obj) -> dict[str, Any]:
        spec = so.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        name = so["metadata"]["name"]
        metrics = []
        for i, trigger in enumerate(spec.get("triggers") or ()):
            threshold = str((trigger.get("metadata") or {}).get("threshold") or "1")
            target = (
                {"type": "Value", "value": threshold}
                if trigger.get("metricType") == "Value"
                else {"type": "AverageValue", "averageValue": threshold}
            )
            metric = {"name": f"s{i}-{trigger.get('type')}", "selector": {"matchLabels": {SCALED_OBJECT_LABEL: name}}}
            metrics.append({"type": "External", "external": {"metric": metric, "target": target}})
        config = (spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}
        out: dict[str, Any] = {
            "scaleTargetRef": {
                "apiVersion": ref.get("apiVersion") or "apps/v1",
                "kind": ref.get("kind") or "Deployment",
                "name": ref.get("name"),
            },
            "minReplicas": max(1, int(spec.get("minReplicaCount") or 0)),
            "maxReplicas": int(spec.get("maxReplicaCount") or 100),
            "metrics": metrics,
        }
        if config.get("behavior"):
            out["behavior"] = config["behavior"]
        return out

    def _one(self, so: Obj) -> None:
        meta, spec = so["metadata"], so.get("spec") or {}
        ns, name = meta.get("namespace", ""), meta["name"]
        now, wall = self._clock.now(), self._clock.wall()
        self._created.setdefault((ns, name), now)
        hpa_name = _hpa_name(so)
        body = {
            "metadata": {
                "name": hpa_name,
                "namespace": ns,
                "labels": {"app.kubernetes.io/managed-by": "keda-operator", SCALED_OBJECT_LABEL: name},
                "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _SKIP_ANNOTATIONS},
                "ownerReferences": [
                    {
                        "apiVersion": "keda.sh/v1alpha1",
                        "kind": "ScaledObject",
                        "name": name,
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": self._hpa_spec(so),
        }
        existing = self._store.lookup(self._store.type_of(HPAS), hpa_name, ns)
        if existing is None:
            self._store.create(HPAS, body, namespace=ns)
        elif (
            existing.get("spec") != body["spec"]
            or existing["metadata"].get("annotations") != body["metadata"]["annotations"]
        ):
            self._store.patch(
                HPAS,
                hpa_name,
                {"metadata": {"annotations": body["metadata"]["annotations"]}, "spec": body["spec"]},
                namespace=ns,
            )
        problem = next(
            (
                f"trigger type {t.get('type')!r} is not simulated"
                for t in spec.get("triggers") or ()
                if t.get("type") != "prometheus"
            ),
            "",
        )
        active = False
        if not problem:
            for i, trigger in enumerate(spec.get("triggers") or ()):
                activation = float((trigger.get("metadata") or {}).get("activationThreshold") or 0)
                active = active or self.trigger_value(ns, name, i) > activation
        if active:
            self._last_active[(ns, name)] = now
        self._activate(so, active, now)
        ready = (
            ("False", "TriggerNotSimulated", problem) if problem else ("True", "ScaledObjectReady", "ready for scaling")
        )
        status = {
            "hpaName": hpa_name,
            "scaleTargetKind": "{apiVersion}.{kind}".format(**body["spec"]["scaleTargetRef"]),
            "externalMetricNames": [m["external"]["metric"]["name"] for m in body["spec"]["metrics"]],
            "conditions": [
                {"type": "Ready", "status": ready[0], "reason": ready[1], "message": ready[2]},
                {"type": "Active", "status": str(active), "reason": "ScalerActive" if active else "ScalerNotActive"},
                {"type": "Fallback", "status": "False", "reason": "NoFallbackFound", "message": "not simulated"},
            ],
        }
        if (ns, name) in self._last_active:
            status["lastActiveTime"] = _time(wall - (now - self._last_active[(ns, name)]))
        self._store.patch(SCALED_OBJECTS, name, {"status": status}, namespace=ns, subresource="status")

    def _activate(self, so: Obj, active: bool, now: float) -> None:
        meta, spec = so["metadata"], so.get("spec") or {}
        ns, name = meta.get("namespace", ""), meta["name"]
        ref = self._hpa_spec(so)["scaleTargetRef"]
        api_version = str(ref["apiVersion"])
        kind = f"{ref['kind']}.{api_version.partition('/')[0]}" if "/" in api_version else str(ref["kind"])
        target = self._store.lookup(self._store.type_of(kind), str(ref["name"]), ns)
        if target is None:
            return
        replicas = int((target.get("spec") or {}).get("replicas", 1))
        low = int(spec.get("minReplicaCount") or 0)
        if active and replicas == 0:
            self._scale(kind, str(ref["name"]), ns, max(1, low))
            return
        cooldown = float(spec.get("cooldownPeriod", 300))
        initial = float(spec.get("initialCooldownPeriod", 0))
        last = self._last_active.get((ns, name), self._created[(ns, name)])
        settled = now - self._created[(ns, name)] >= initial and now - last >= cooldown
        if not active and low == 0 and replicas > 0 and settled:
            self._scale(kind, str(ref["name"]), ns, 0)

    def _scale(self, kind: str, name: str, ns: str, replicas: int) -> None:
        self._store.patch(kind, name, {"spec": {"replicas": replicas}}, namespace=ns, subresource="scale")
        log.info("sim keda scaled", extra={"target": f"{ns}/{name}", "to": replicas})


class ClusterMetrics:
    """The external metrics API of the fake cluster: KEDA's for its HPAs, else prometheus-adapter's."""

    def __init__(self, prometheus: PrometheusStandIn, keda: KedaOperator) -> None:
        self._adapter = AdapterMetrics(prometheus)
        self._keda = keda

    async def values(self, namespace: str, name: str, selector: Mapping[str, str]) -> list[float]:
        so = selector.get(SCALED_OBJECT_LABEL)
        if so is None:
            return await self._adapter.values(namespace, name, selector)
        m = _METRIC.match(name)
        if m is None:
            raise MetricError(f"metric {name!r} is not a KEDA trigger metric (s<i>-<type>)")
        return [self._keda.trigger_value(namespace, so, int(m.group(1)))]
