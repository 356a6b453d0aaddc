"""``llm_d_epp_plugin_data_scope_violations_total``: data accesses refused because a plugin did not declare them.

The llm-d router's counter (labels ``extension_point``, ``plugin_type``, ``plugin_name``,
``access``: ``read`` or ``write``). A non-zero value means a plugin's code has drifted from its
declarations (``framework.data``): its refused reads resolved as absent, its refused writes were
dropped. ``extension_point`` is the plugin's declared kinds (``+``-joined): a scope serves the
plugin wherever it runs. Only llm-d has this series (none under ``--metrics-naming=gie``).
"""

from __future__ import annotations

from collections.abc import Iterable

from epp.framework.data import DataKey, DataScope
from epp.telemetry.families import CounterFamily, Names
from epp.telemetry.metrics import EppMetrics

__all__ = ["DataScopeViolations"]

_NAMES = Names(
    None,
    "llm_d_epp_plugin_data_scope_violations_total",
    "Total number of data accesses rejected because the plugin did not declare the DataKey in what it "
    "produces or consumes, by extension point, plugin type, plugin name and access kind (read or write).",
    labels=("extension_point", "plugin_type", "plugin_name", "access"),
)


class DataScopeViolations:
    """The counter, fed by every scope :meth:`watch` is given; a series set, one per process's metrics."""

    def __init__(self, metrics: EppMetrics) -> None:
        self._family: CounterFamily = metrics.families.counter(_NAMES)

    def watch(self, scopes: Iterable[DataScope]) -> None:
        """Count the refused accesses of ``scopes`` from now on."""
        for scope in scopes:
            scope.report = self._count

    def _count(self, scope: DataScope, access: str, key: DataKey) -> None:
        owner = scope.owner
        self._family.labels(scope.kinds, owner.type, owner.name, access).inc()
