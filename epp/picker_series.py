"""Every series set of ``epp serve``, declared at once when the runtime starts.

Each area declares the series it writes next to its own code (a series set, see
:mod:`epp.telemetry.metrics`) and asks for it when it first writes. ``epp serve`` declares them
all up front, so ``/metrics`` lists each family (with its HELP) before anything has been counted,
as upstream registers its series at start: a flow-control panel finds its series with the gate
off, a fresh picker shows its reload counter at 0. The gRPC stream series are the exception: they
exist only with ``--enable-grpc-stream-metrics``, as upstream's.
"""

from __future__ import annotations

from epp.config.config_series import ConfigSeries
from epp.config.data_scope_series import DataScopeViolations
from epp.datalayer.pool_gauges import PoolSeries
from epp.datalayer.scraper import ScrapeSeries
from epp.datastore.health_recorder import HealthSeries
from epp.extproc.observe import RequestSeries
from epp.extproc.server import ServerSeries
from epp.flowcontrol.controller import FlowControlSeries
from epp.kube.manager import KubeSeries
from epp.requestcontrol.plugin_series import PluginSeries
from epp.requestcontrol.recorder import RequestControlSeries
from epp.scheduling.plugin_errors import PluginErrors
from epp.scheduling.recorder import SchedulingSeries
from epp.telemetry.metrics import EppMetrics

__all__ = ["PICKER_SERIES", "declare_picker_series"]

PICKER_SERIES = (
    ServerSeries,
    RequestSeries,
    PoolSeries,
    SchedulingSeries,
    PluginErrors,
    PluginSeries,
    RequestControlSeries,
    FlowControlSeries,
    ScrapeSeries,
    ConfigSeries,
    DataScopeViolations,
    KubeSeries,
    HealthSeries,
)


def declare_picker_series(metrics: EppMetrics) -> None:
    """Declare every set of :data:`PICKER_SERIES` on ``metrics`` (a set declared already is kept)."""
    for declare in PICKER_SERIES:
        metrics.series(declare)
