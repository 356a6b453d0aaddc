"""A plugin that breaks its contract, counted and logged: ``epp_plugin_errors_total`` and a log that does not flood.

The request path contains every plugin the same way, in-tree or installed (docs/plugins.md,
"When a plugin fails"): the caller applies the rule of the extension point (a filter is skipped, a
scorer adds nothing, a picker's choice falls back to the best total, ...) and tells its recorder,
whose serving implementation ends here. Each failure counts once in
``epp_plugin_errors_total{extension_point, plugin_type, plugin_name, reason}``, ``reason`` one of
:data:`REASONS`. The first failure of a plugin for a reason is logged at ERROR (with the traceback
of an exception), then at most one line per :data:`LOG_INTERVAL` seconds with the number since, so
a plugin failing on every request cannot flood the log; each failure is logged at DEBUG.

A plugin call that holds the event loop longer than :data:`SLOW_CALL` seconds counts as ``slow``:
a scheduling cycle is synchronous, so every stream waits for it. The call is not interrupted (it
cannot be): its result is used.

Callers tell failures through a :data:`PluginFailed` (a cycle recorder's ``plugin_failed``, or
:meth:`PluginErrors.failed` itself). The saturation detector is read in two places, admission and
the flow-control queue, by one rule: :func:`read_saturation`.

The series is declared here, next to what writes it: :class:`PluginErrors` is the series set,
declared once per process's metrics (``metrics.series(PluginErrors)``) and shared by every pool.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.saturation import SaturationDetector
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter

__all__ = [
    "EXCEPTION",
    "LOG_INTERVAL",
    "MALFORMED",
    "OUT_OF_RANGE",
    "REASONS",
    "PluginFailed",
    "SLOW",
    "SLOW_CALL",
    "PluginErrors",
    "Reason",
    "read_saturation",
]

log = logging.getLogger(__name__)

Reason = Literal["exception", "malformed", "out_of_range", "slow"]
EXCEPTION: Final = "exception"
"""The call raised."""
MALFORMED: Final = "malformed"
"""The call returned something the contract does not allow (a wrong number of scores, not numbers, ...)."""
OUT_OF_RANGE: Final = "out_of_range"
"""A scorer returned a score outside [0, 1] (or NaN); it was clamped."""
SLOW: Final = "slow"
"""The call held the event loop longer than :data:`SLOW_CALL`."""
REASONS: Final = (EXCEPTION, MALFORMED, OUT_OF_RANGE, SLOW)

SLOW_CALL: Final = 0.1
LOG_INTERVAL: Final = 60.0

PluginFailed = Callable[[str, TypedName, Reason, str, BaseException | None], None]
"""Where a plugin that broke its contract is told: (extension point, plugin, reason, detail, exception)."""


class PluginErrors:
    """Counts and logs plugin failures; a series set: one per process's metrics (``metrics.series(PluginErrors)``)."""

    __slots__ = ("_clock", "_errors", "_logged")

    def __init__(self, metrics: EppMetrics, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._errors = Counter(
            "epp_plugin_errors",
            "Plugin calls that broke their contract, by extension point, plugin and reason (exception, "
            "malformed, out_of_range, slow); the request went on by the extension point's rule (docs/plugins.md).",
            ("extension_point", "plugin_type", "plugin_name", "reason"),
            registry=metrics.registry,
        )
        self._clock = clock
        self._logged: dict[tuple[str, str, str, str], tuple[float, int]] = {}
        """(extension point, type, name, reason) → (when the next ERROR line may be written, failures since)."""

    def failed(
        self, extension_point: str, plugin: TypedName, reason: Reason, detail: str, error: BaseException | None
    ) -> None:
        """Count one failure and log it (see the module docstring)."""
        self._errors.labels(extension_point, plugin.type, plugin.name, reason).inc()
        key = (extension_point, plugin.type, plugin.name, reason)
        now = self._clock()
        due, since = self._logged.get(key, (now, 0))
        extra: dict[str, object] = {
            "extension_point": extension_point,
            "plugin": str(plugin),
            "reason": reason,
            "detail": detail,
        }
        if now < due:
            self._logged[key] = (due, since + 1)
            log.debug("plugin failed", extra=extra, exc_info=error)
            return
        self._logged[key] = (now + LOG_INTERVAL, 0)
        extra["since_last_log"] = since
        log.error("plugin failed; the request goes on by the extension point's rule", extra=extra, exc_info=error)

    def timed(self, extension_point: str, plugin: TypedName, seconds: float) -> None:
        """A synchronous call took ``seconds``: counted as :data:`SLOW` above :data:`SLOW_CALL`."""
        if seconds > SLOW_CALL:
            self.failed(extension_point, plugin, SLOW, f"held the event loop for {seconds * 1000:.0f} ms", None)


def read_saturation(
    detector: SaturationDetector,
    endpoints: Sequence[EndpointState],
    now: float,
    failed: PluginFailed,
    *,
    fallback: float = 0.0,
) -> float:
    """The detector's saturation of ``endpoints``; ``fallback`` when it raises or answers no number.

    The fallback is 0 (not saturated: fail open) except where the caller knows better: the
    flow-control queue holds its requests while the pool has no endpoint at all.
    """
    try:
        saturation = detector.saturation(endpoints, now)
        if isinstance(saturation, int | float):  # NaN compares False everywhere: not saturated, as upstream's Go
            return saturation
        detail = f"returned a {type(saturation).__name__}, not a number"
        failed("SaturationDetector", detector.typed_name, MALFORMED, detail, None)
    except Exception as exc:
        failed("SaturationDetector", detector.typed_name, EXCEPTION, f"{type(exc).__name__}: {exc}", exc)
    return fallback
