"""Scale-from-zero: a variant at zero replicas goes to 1 while the picker's flow-control queue holds its model."""

from __future__ import annotations

import aiohttp
from autoscale_fakes import FakeCluster, PinnedSource, va

from epp.autoscale.controller import Controller, ControllerOptions
from epp.autoscale.decision import Reason
from epp.autoscale.types import VariantKey
from epp.autoscale.wake import PickerReader
from epp.clock import ManualClock
from epp.flowcontrol.controller import FlowControlSeries
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.metrics_server import MetricsServer

FLOW = ("default-flow", "0", "pool")


async def test_the_picker_queue_wakes_the_variant_of_its_model() -> None:
    picker = EppMetrics()  # the picker's own series, served by its own /metrics server
    server = MetricsServer(picker)
    port = await server.start("127.0.0.1", 0)
    cluster = FakeCluster()
    cluster.add_va(va("ns", "llama", model="llama"))
    cluster.add_va(va("ns", "other", model="other"))
    cluster.set_deployment("ns", "llama", spec=0)
    cluster.set_deployment("ns", "other", spec=0)
    try:
        async with aiohttp.ClientSession() as session:
            urls = [f"http://127.0.0.1:{port}/metrics", "http://127.0.0.1:1/metrics"]  # one picker is down
            clock = ManualClock()
            ctl = Controller(
                cluster,
                PinnedSource(),
                clock=clock,
                options=ControllerOptions(),
                picker=PickerReader(session, urls, clock),
            )
            out = await ctl.run_cycle()
            assert out[VariantKey("ns", "llama")].decision.reason is Reason.INACTIVE  # type: ignore[union-attr]
            assert cluster.scales == []

            queue = picker.series(FlowControlSeries).queue_size
            queue.labels(*FLOW, "alias", "llama").inc()  # one request for llama waits
            out = await ctl.run_cycle()
            woken = out[VariantKey("ns", "llama")]
            assert woken.decision is not None
            assert (woken.decision.current, woken.decision.target) == (0, 1)
            assert woken.decision.reason is Reason.WAKE and woken.actuated  # directly, as WVA, without --actuate
            assert out[VariantKey("ns", "other")].decision.reason is Reason.INACTIVE  # type: ignore[union-attr]
            assert cluster.scales == [("ns", "llama", 1)]
    finally:
        await server.stop()
