"""What endpoint health changes look like from outside: a gauge per state, a counter, one log line each.

:mod:`epp.framework.health` decides; this module is its :data:`~epp.framework.health.Transition`
listener and follows the datastore, so an endpoint's series appear when it joins the pool (as
``healthy``) and disappear when it leaves. A transition happens once per change of state, never
per request, so the log line per transition stays readable when a pod dies under load.
:class:`HealthSeries` declares the two series (ours; upstream has no endpoint health).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from epp.framework.endpoint import EndpointState
from epp.framework.health import EndpointHealth, Health
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter, Gauge

__all__ = ["HealthRecorder", "HealthSeries"]

log = logging.getLogger(__name__)

_STATES = tuple(h.value for h in Health)


class HealthSeries:
    """``epp_endpoint_health{state}`` (1 for the state an endpoint is in) and its transitions."""

    def __init__(self, metrics: EppMetrics) -> None:
        self.state = Gauge(
            "epp_endpoint_health",
            "1 for the health state each endpoint is in (healthy, suspect, unreachable, ejected), 0 for the "
            "others; from scrapes and the responses of requests routed there.",
            ("namespace", "endpoint_name", "state"),
            registry=metrics.registry,
        )
        self.transitions = Counter(
            "epp_endpoint_health_transitions_total",
            "Endpoint health state changes, by endpoint and the states left and entered (the log says why).",
            ("namespace", "endpoint_name", "from_state", "to_state"),
            registry=metrics.registry,
        )


class HealthRecorder:
    """``transition`` is the pool's health listener; ``on_endpoints`` follows the datastore."""

    def __init__(self, metrics: EppMetrics, pool: str) -> None:
        series = metrics.series(HealthSeries)
        self._gauge = series.state
        self._transitions = series.transitions
        self._pool = pool

    def transition(self, health: EndpointHealth, old: Health, new: Health, reason: str) -> None:
        namespace, _, name = health.key.partition("/")
        self._gauge.labels(namespace, name, old.value).set(0)
        self._gauge.labels(namespace, name, new.value).set(1)
        self._transitions.labels(namespace, name, old.value, new.value).inc()
        level = logging.INFO if new is Health.HEALTHY else logging.WARNING
        log.log(
            level,
            "Endpoint health changed",
            extra={"pool": self._pool, "endpoint": health.key, "from": old.value, "to": new.value, "reason": reason},
        )

    def on_endpoints(self, added: Sequence[EndpointState], removed: Sequence[EndpointState]) -> None:
        gauge = self._gauge
        for state in removed:
            namespace, _, name = state.endpoint.key.partition("/")
            for value in _STATES:
                gauge.remove(namespace, name, value)
        for state in added:
            namespace, _, name = state.endpoint.key.partition("/")
            current = state.health.state.value
            for value in _STATES:
                gauge.labels(namespace, name, value).set(1 if value == current else 0)
