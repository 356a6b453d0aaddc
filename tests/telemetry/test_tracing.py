"""``--tracing``: spans of the real picker, received by real OTLP receivers (gRPC and HTTP) on loopback.

The receivers implement the collector's side of OTLP from ``opentelemetry-proto``; the picker
is the hermetic ``epp_pool`` (fake API server, simulated vLLM pods, ``epp serve`` in-process),
pointed at a receiver through the standard ``OTEL_*`` variables.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanPb
from opentelemetry.proto.trace.v1.trace_pb2 import Status
from otlp_receiver import Collector, grpc_receiver, http_receiver

from epp.config.defaults import DEFAULT_PROFILE_NAME, DEFAULT_SCORERS
from epp.telemetry.tracing import (
    DEFAULT_SERVICE_NAME,
    HANDLERS_SCOPE,
    REQUEST_CONTROL_SCOPE,
    SCHEDULING_SCOPE,
    Tracing,
    TracingError,
    TracingSettings,
)
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.extproc_client import post_headers, request_body, request_headers, response_headers
from epp_sim.waits import wait_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
BODY = {"model": "m", "prompt": "hello"}
SERVER = SpanPb.SpanKind.SPAN_KIND_SERVER
INTERNAL = SpanPb.SpanKind.SPAN_KIND_INTERNAL


@pytest_asyncio.fixture
async def otlp_grpc() -> AsyncIterator[Collector]:
    async with grpc_receiver() as collector:
        yield collector


@pytest_asyncio.fixture
async def otlp_http() -> AsyncIterator[Collector]:
    async with http_receiver() as collector:
        yield collector


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No ``OTEL_*`` variable of the machine's environment leaks into the test."""
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    return monkeypatch


Point = Callable[..., None]


@pytest.fixture
def exporting_to(otel_env: pytest.MonkeyPatch) -> Point:
    """Point the OTel environment at a receiver; every sampled span is exported within ~20 ms."""

    def point(collector: Collector, **extra: str) -> None:
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
        otel_env.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
        for name, value in extra.items():
            otel_env.setenv(name, value)

    return point


def _traceparent(header: bytes) -> tuple[str, str, str]:
    version, trace_id, span_id, flags = header.decode().split("-")
    assert version == "00"
    return trace_id, span_id, flags


async def test_request_spans_continue_the_callers_trace(
    epp_pool: PoolFactory, otlp_grpc: Collector, exporting_to: Point
) -> None:
    exporting_to(otlp_grpc, OTEL_TRACES_SAMPLER="always_on", OTEL_SERVICE_NAME="llm-d-router/epp")
    pool = await epp_pool("v1", pods=2)
    routed = await pool.route(BODY, headers={"traceparent": TRACEPARENT, "baggage": "tenant=blue"})
    assert routed.status == 200
    scorer_spans = [f"llm_d.epp.scorer.{scorer}" for scorer, _ in DEFAULT_SCORERS]
    await wait_until(lambda: len(otlp_grpc.spans) == 6 + len(scorer_spans), message="the request's spans")

    request = otlp_grpc.one("gateway.request")
    assert (request.trace_id, request.parent_id, request.kind) == (TRACE_ID, CALLER_SPAN, SERVER)
    assert request.scope == HANDLERS_SCOPE and request.status.code == Status.STATUS_CODE_UNSET
    assert request.resource["service.name"] == "llm-d-router/epp"  # OTEL_SERVICE_NAME wins over llm-d-epp
    # The model server is sent our span as its parent, and the caller's baggage.
    assert _traceparent(routed.headers["traceparent"]) == (TRACE_ID, request.span_id, "01")
    assert routed.headers["baggage"] == b"tenant=blue"

    orchestration = otlp_grpc.one("gateway.request_orchestration")
    assert (orchestration.parent_id, orchestration.kind, orchestration.scope) == (
        request.span_id,
        SERVER,
        REQUEST_CONTROL_SCOPE,
    )
    assert orchestration.attributes == {"target_model": "m", "request_prio": 0}

    profile = otlp_grpc.one("run_scheduler_profile")
    assert (profile.parent_id, profile.kind, profile.scope) == (orchestration.span_id, INTERNAL, SCHEDULING_SCOPE)
    assert profile.attributes == {"llm_d.epp.scheduling.profile.name": DEFAULT_PROFILE_NAME}

    request_attributes = {"gen_ai.request.model": "m", "gen_ai.request.id": routed.headers["x-request-id"].decode()}
    filters = otlp_grpc.one("filter_endpoints")
    assert filters.parent_id == profile.span_id
    assert filters.attributes == {
        "llm_d.epp.filter.candidate_endpoints": 2,
        "llm_d.epp.filter.filtered_endpoints": 2,
        **request_attributes,
    }
    scoring = otlp_grpc.one("llm_d.epp.scoring")
    assert scoring.parent_id == profile.span_id
    assert scoring.attributes == {
        "llm_d.epp.scorer.count": len(DEFAULT_SCORERS),
        "llm_d.epp.scoring.candidate_endpoints": 2,
        **request_attributes,
    }
    for (scorer_type, weight), name in zip(DEFAULT_SCORERS, scorer_spans, strict=True):
        scorer = otlp_grpc.one(name)
        assert scorer.parent_id == scoring.span_id
        attributes = scorer.attributes
        assert (attributes["llm_d.epp.scorer.type"], attributes["llm_d.epp.scorer.name"]) == (scorer_type, scorer_type)
        assert attributes["llm_d.epp.scorer.weight"] == weight
        assert (
            attributes["llm_d.epp.scorer.candidate_endpoints"] == attributes["llm_d.epp.scorer.endpoints_scored"] == 2
        )
        assert 0.0 <= attributes["llm_d.epp.scorer.score.avg"] <= attributes["llm_d.epp.scorer.score.max"] <= 1.0
    pick = otlp_grpc.one("pick_endpoints")
    assert pick.parent_id == profile.span_id
    keys = {f"{e.endpoint.namespace}/{e.endpoint.name}" for e in pool.endpoints()}
    assert set(pick.attributes["llm_d.epp.picker.top_endpoints"]) == keys
    scores = pick.attributes["llm_d.epp.picker.top_scores"]
    assert scores == sorted(scores, reverse=True) and pick.attributes["llm_d.epp.picker.candidate_endpoints"] == 2
    assert {s.trace_id for s in otlp_grpc.spans} == {TRACE_ID}


async def test_a_request_without_traceparent_starts_a_trace_and_errors_mark_it(
    epp_pool: PoolFactory, otlp_grpc: Collector, exporting_to: Point
) -> None:
    exporting_to(otlp_grpc, OTEL_TRACES_SAMPLER="always_on")
    pool = await epp_pool("v1", pods=1)
    routed = await pool.route(BODY)
    rejected = await pool.route(b"{not json")
    assert (routed.status, rejected.status) == (200, 400)
    await wait_until(lambda: len(otlp_grpc.named("gateway.request")) == 2, message="both request spans")

    ok, failed = sorted(otlp_grpc.named("gateway.request"), key=lambda s: s.status.code)
    assert ok.parent_id == "" and _traceparent(routed.headers["traceparent"])[:2] == (ok.trace_id, ok.span_id)
    assert ok.resource["service.name"] == DEFAULT_SERVICE_NAME
    assert failed.status.code == Status.STATUS_CODE_ERROR
    assert failed.status.message == rejected.error.decode()  # "inference error: BadRequest - ..."
    assert [s.trace_id for s in otlp_grpc.spans if s.trace_id == failed.trace_id] == [failed.trace_id]


async def test_a_model_server_error_marks_the_request_span(
    epp_pool: PoolFactory, otlp_grpc: Collector, exporting_to: Point
) -> None:
    exporting_to(otlp_grpc, OTEL_TRACES_SAMPLER="always_on")
    pool = await epp_pool("v1", pods=1)
    call = pool.client.open()
    await call.send(request_headers(post_headers()), request_body(json.dumps(BODY).encode()))
    await call.recv(2)  # routed: the headers answer and the body
    await call.send(response_headers({":status": "503"}, eos=True))
    await call.recv_one()
    await call.end()
    await wait_until(lambda: bool(otlp_grpc.named("gateway.request")), message="the request span")
    status = otlp_grpc.one("gateway.request").status
    assert (status.code, status.message) == (Status.STATUS_CODE_ERROR, "ModelServerError")
    assert otlp_grpc.one("gateway.request_orchestration").status.code == Status.STATUS_CODE_UNSET


async def test_default_sampler_follows_the_callers_decision(
    epp_pool: PoolFactory, otlp_grpc: Collector, exporting_to: Point
) -> None:
    exporting_to(otlp_grpc)  # parentbased_traceidratio, as upstream
    pool = await epp_pool("v1", pods=1)
    unsampled_trace = "0af7651916cd43dd8448eb211c80319c"
    dropped = await pool.route(BODY, headers={"traceparent": f"00-{unsampled_trace}-b7ad6b7169203331-00"})
    kept = await pool.route(BODY, headers={"traceparent": TRACEPARENT})
    await wait_until(lambda: bool(otlp_grpc.named("gateway.request")), message="the sampled request span (its last)")

    assert {s.trace_id for s in otlp_grpc.spans} == {TRACE_ID}  # nothing of the unsampled request
    trace_id, span_id, flags = _traceparent(dropped.headers["traceparent"])
    assert (trace_id, flags) == (unsampled_trace, "00") and span_id != "b7ad6b7169203331"
    assert _traceparent(kept.headers["traceparent"])[1] == otlp_grpc.one("gateway.request").span_id


async def test_spans_are_flushed_when_the_picker_stops(
    epp_pool: PoolFactory, otlp_grpc: Collector, exporting_to: Point
) -> None:
    exporting_to(otlp_grpc, OTEL_TRACES_SAMPLER="always_on", OTEL_BSP_SCHEDULE_DELAY="60000")
    pool = await epp_pool("v1", pods=1)
    assert (await pool.route(BODY)).status == 200
    assert otlp_grpc.spans == []  # the batch waits a minute...
    await pool.picker.stop()
    assert {s.name for s in otlp_grpc.spans} >= {"gateway.request", "pick_endpoints"}  # ...but stop flushes it


async def test_otlp_over_http_protobuf(epp_pool: PoolFactory, otlp_http: Collector, exporting_to: Point) -> None:
    exporting_to(otlp_http, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_TRACES_SAMPLER="always_on")
    pool = await epp_pool("v1", pods=1)
    routed = await pool.route(BODY, headers={"traceparent": TRACEPARENT})
    await wait_until(lambda: bool(otlp_http.named("gateway.request")), message="the request span over HTTP")
    request = otlp_http.one("gateway.request")
    assert (request.trace_id, request.parent_id) == (TRACE_ID, CALLER_SPAN)
    assert _traceparent(routed.headers["traceparent"])[1] == request.span_id


async def test_without_an_endpoint_no_exporter_runs_and_one_line_says_so(
    epp_pool: PoolFactory, otel_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="epp.telemetry.tracing"):
        pool = await epp_pool("v1", pods=1)
    assert pool.runtime.options.tracing and pool.runtime.tracing is None
    lines = [r.getMessage() for r in caplog.records if r.name == "epp.telemetry.tracing"]
    assert len(lines) == 1 and lines[0].startswith("tracing: no exporter configured")
    routed = await pool.route(BODY, headers={"traceparent": TRACEPARENT})
    assert "traceparent" not in routed.headers  # the caller's goes upstream untouched


async def test_tracing_false_does_nothing(
    epp_pool: PoolFactory, otlp_grpc: Collector, exporting_to: Point, caplog: pytest.LogCaptureFixture
) -> None:
    exporting_to(otlp_grpc, OTEL_TRACES_SAMPLER="always_on")
    with caplog.at_level(logging.DEBUG, logger="epp.telemetry.tracing"):
        pool = await epp_pool("v1", pods=1, picker_args=["--tracing=false"])
    assert pool.runtime.tracing is None and not [r for r in caplog.records if r.name == "epp.telemetry.tracing"]
    routed = await pool.route(BODY, headers={"traceparent": TRACEPARENT})
    assert "traceparent" not in routed.headers
    await pool.picker.stop()  # a tracing picker would flush its spans here
    assert otlp_grpc.spans == []


async def test_console_exporter_prints_the_spans(
    otel_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    otel_env.setenv("OTEL_TRACES_EXPORTER", "console")
    otel_env.setenv("OTEL_TRACES_SAMPLER", "always_on")
    tracing = Tracing.from_environment()
    assert tracing is not None
    upstream: dict[str, str] = {}
    trace = tracing.start_request({}, upstream)
    trace.end()
    await tracing.shutdown()
    printed = json.loads(capsys.readouterr().out)
    assert printed["name"] == "gateway.request"
    assert printed["context"]["span_id"] == "0x" + upstream["traceparent"].split("-")[2]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, TracingSettings()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, TracingSettings(exporters=("otlp",))),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, TracingSettings(exporters=("otlp",))),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, TracingSettings(exporters=("otlp",))),  # localhost:4317, as upstream
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, TracingSettings()),
        ({"OTEL_TRACES_EXPORTER": "otlp, console,otlp"}, TracingSettings(exporters=("otlp", "console"))),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
            TracingSettings(exporters=("otlp",), protocol="http/protobuf"),
        ),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"},
            TracingSettings(sampler="traceidratio", ratio=0.5),
        ),
        ({"OTEL_TRACES_SAMPLER": "always_on", "OTEL_TRACES_SAMPLER_ARG": "junk"}, TracingSettings(sampler="always_on")),
    ],
)
def test_settings_from_the_environment(environ: dict[str, str], expected: TracingSettings) -> None:
    assert TracingSettings.from_environ(environ) == expected


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER: unsupported exporter(s) ['zipkin']"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: unsupported protocol 'http/json'",
        ),
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER: unsupported sampler 'jaeger_remote'"),
        ({"OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG: parentbased_traceidratio needs a ratio"),
        ({"OTEL_TRACES_SAMPLER_ARG": "half"}, "OTEL_TRACES_SAMPLER_ARG: parentbased_traceidratio needs a ratio"),
    ],
)
def test_settings_the_picker_cannot_honour_are_errors(environ: dict[str, str], message: str) -> None:
    with pytest.raises(TracingError) as err:
        TracingSettings.from_environ(environ)
    assert str(err.value).startswith(message)


def _stale_otlp_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """``opentelemetry.proto`` as another distribution's older copy leaves it: no ``InstrumentationScope``."""
    from opentelemetry.proto.common.v1 import common_pb2

    monkeypatch.delattr(common_pb2, "InstrumentationScope")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")


def test_otlp_refused_naming_the_distribution_that_overwrote_the_otlp_messages(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """epp no longer depends on xds-protos, but a user's environment may hold it: the error names it."""
    _stale_otlp_messages(monkeypatch)
    info = tmp_path / "xds_protos-1.85.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: xds-protos\nVersion: 1.85.0\n")
    (info / "RECORD").write_text("opentelemetry/proto/common/v1/common_pb2.py,,\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TracingError) as err:
        Tracing.from_environment()
    message = str(err.value)
    assert "common_pb2.py is an older copy (installed over it by xds-protos 1.85.0)" in message
    assert message.endswith("run: pip install --no-deps --force-reinstall opentelemetry-proto")


def test_otlp_refused_when_the_messages_are_stale_and_nobody_else_claims_them(monkeypatch: pytest.MonkeyPatch) -> None:
    _stale_otlp_messages(monkeypatch)
    with pytest.raises(TracingError, match=r"older copy \(no other installed distribution claims it\); run: pip"):
        Tracing.from_environment()
