"""The configuration's own series (ours; upstream has none): reloads, the last one's result, ignored settings.

Declared once on the process's metrics (``metrics.series(ConfigSeries)``) and written when a
configuration is put in force (:func:`publish_notices`: its notices logged, and which of its
settings this picker runs without) and by the watcher (each reload of ``--config-file`` and
whether the last one took).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Set

from epp.config.compat import IGNORABLE_SETTINGS, ConfigNotice
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter, Gauge

__all__ = ["ConfigSeries", "publish_notices"]

log = logging.getLogger(__name__)


class ConfigSeries:
    """``epp_config_reloads_total{result}``, ``epp_config_last_reload_successful``, ``epp_config_ignored_settings``."""

    def __init__(self, metrics: EppMetrics) -> None:
        r = metrics.registry
        self.reloads = Counter(
            "epp_config_reloads_total", "Configuration reloads by result (success, rejected).", ("result",), registry=r
        )
        self.last_reload_success = Gauge(
            "epp_config_last_reload_successful",
            "1 if the last configuration load succeeded, 0 if the last good configuration is kept.",
            registry=r,
        )
        self.ignored_settings = Gauge(
            "epp_config_ignored_settings",
            "1 for each setting of the loaded EndpointPickerConfig that this picker does not implement and "
            "runs without (the log says why); 0 once a configuration no longer has it.",
            ("setting",),
            registry=r,
        )

    def set_ignored(self, ignored: Set[str]) -> None:
        """Each setting this picker can run without: 1 if the loaded configuration has it (``ignored``), else 0."""
        for setting in IGNORABLE_SETTINGS:
            self.ignored_settings.labels(setting).set(1 if setting in ignored else 0)


def publish_notices(notices: Iterable[ConfigNotice], metrics: EppMetrics) -> None:
    """The notices of the configuration now in force: each distinct one logged once (several pools load
    the same file) and ``epp_config_ignored_settings`` set to what it runs without."""
    distinct = tuple(dict.fromkeys(notices))
    metrics.series(ConfigSeries).set_ignored({n.setting for n in distinct if not n.deprecated})
    for notice in distinct:
        message = "deprecated configuration setting" if notice.deprecated else "configuration setting has no effect"
        log.warning(message, extra={"setting": notice.setting, "detail": notice.detail})
