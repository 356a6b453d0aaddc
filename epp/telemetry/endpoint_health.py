"""What endpoint health changes look like from outside: a gauge per state, a counter, one log line each.

:mod:`epp.framework.health` decides; this module is its :data:`~epp.framework.health.Transition`
listener and follows the datastore, so an endpoint's series appear when it joins the pool (as
``healthy``) and disappear when it leaves. A transition happens once per change of state, never
per request, so the log line per transition stays readable when a pod dies under load.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from epp.framework.endpoint import EndpointState
from epp.framework.health import EndpointHealth, Health
from epp.telemetry.metrics import EppMetrics

__all__ = ["HealthRecorder"]

log = logging.getLogger(__name__)

_STATES = tuple(h.value for h in Health)


class HealthRecorder:
    """``transition`` is the pool's health listener; ``on_endpoints`` follows the datastore."""

    def __init__(self, metrics: EppMetrics, pool: str) -> None:
        self._gauge = metrics.endpoint_health
        self._transitions = metrics.endpoint_health_transitions
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
