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
from epp.extproc.grpc_stream_metrics import GrpcStreamMetrics
from epp.extproc.observe import RequestSeries
from epp.extproc.server import ServerSeries
from epp.flowcontrol.controller import FlowControlSeries
from epp.kube.manager import KubeSeries
from epp.requestcontrol.plugin_series import PluginSeries
from epp.requestcontrol.recorder import RequestControlSeries
from epp.scheduling.plugin_errors import PluginErrors
from epp.scheduling.recorder import SchedulingSeries
from epp.slo.series import SloSeries
from epp.telemetry.families import MetricsNaming
from epp.telemetry.metrics import EppMetrics
from epp.workers.supervisor import WorkerSeries

__all__ = ["PICKER_SERIES", "WORKER_SERIES", "declare_picker_series", "worker_family_names"]

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


WORKER_SERIES = (
    RequestSeries,
    SchedulingSeries,
    PluginErrors,
    PluginSeries,
    RequestControlSeries,
    FlowControlSeries,
    DataScopeViolations,
    SloSeries,
    GrpcStreamMetrics,
    WorkerSeries,
)
"""The request path's series: with ``--workers``, each child's are added to the parent's on ``/metrics``
(a request is counted by the one process that served it). The other sets describe the pod's pool,
scrapes, configuration and readiness, which every process sees alike: the parent's alone are shown.
A plugin's measured gauges (``PluginSeries``' index sizes) are set only by the parent's scrape hook;
a child's stay empty."""


def worker_family_names(naming: MetricsNaming) -> frozenset[str]:
    """The family names of :data:`WORKER_SERIES` under ``naming``."""
    scratch = EppMetrics(naming=naming)
    for declare in WORKER_SERIES:
        scratch.series(declare)
    return frozenset(m.name for m in scratch.registry.collect())


def declare_picker_series(metrics: EppMetrics) -> None:
    """Declare every set of :data:`PICKER_SERIES` on ``metrics`` (a set declared already is kept)."""
    for declare in PICKER_SERIES:
        metrics.series(declare)
