"""Upstream's opt-in ext_proc stream metrics (``--enable-grpc-stream-metrics``), registered only when on.

The llm-d router (``pkg/epp/metrics/grpc_stream_metrics.go``, its stream interceptor in
``pkg/epp/server/grpc_stream_metrics.go``) counts ``ExternalProcessor/Process`` streams only, not
health or reflection calls:

- ``llm_d_epp_extproc_streams_inflight``: streams open now;
- ``llm_d_epp_extproc_stream_duration_seconds``: how long each stream stayed open;
- ``llm_d_epp_extproc_streams_total{code}``: streams ended, by gRPC status code in Go's spelling
  (``OK``, ``Canceled``, ``Unknown``).

The code is the one the handler ends with, as upstream's interceptor reads it: returning is
``OK`` (the picker answers request errors in-band, with an ImmediateResponse); cancelled while it
still runs, ``Canceled``; raising, ``Unknown`` (e.g. an answer over ``--grpc-max-send-msg-size``).
A stream the gateway resets mostly ends ``OK`` here as upstream: grpc ends the request stream,
and the handler returns (upstream's returns nil when its Recv reports Canceled).
"""

from __future__ import annotations

import asyncio
from time import perf_counter

from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter, Gauge, Histogram

__all__ = ["GrpcStreamMetrics"]

_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600)


class GrpcStreamMetrics:
    """The three series (a series set: ``metrics.series(GrpcStreamMetrics)``, only when the flag is on);
    :meth:`started` and :meth:`finished` bracket each stream.

    Under every ``--metrics-naming``: GIE has no such series to stand in for them.
    """

    __slots__ = ("_duration", "_ended", "_inflight")

    def __init__(self, metrics: EppMetrics) -> None:
        registry = metrics.registry
        self._inflight = Gauge(
            "llm_d_epp_extproc_streams_inflight",
            "[ALPHA] Number of ext_proc gRPC streams currently open.",
            registry=registry,
        )
        self._duration = Histogram(
            "llm_d_epp_extproc_stream_duration_seconds",
            "[ALPHA] Duration an ext_proc gRPC stream stays open, in seconds.",
            buckets=_BUCKETS,
            registry=registry,
        )
        self._ended = Counter(
            "llm_d_epp_extproc_streams",
            "[ALPHA] Total ext_proc gRPC streams completed, by gRPC status code.",
            ("code",),
            registry=registry,
        )

    def started(self) -> float:
        """A stream opened; returns its start time for :meth:`finished`."""
        self._inflight.inc()
        return perf_counter()

    def finished(self, started: float, error: BaseException | None) -> None:
        """The stream ended; ``error`` is what its handler raised (None: it returned)."""
        if error is None:
            code = "OK"
        elif isinstance(error, asyncio.CancelledError):
            code = "Canceled"
        else:
            code = "Unknown"
        self._inflight.dec()
        self._duration.observe(perf_counter() - started)
        self._ended.labels(code).inc()
