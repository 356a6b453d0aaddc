"""OpenTelemetry tracing (``--tracing``): the request span, its children, W3C propagation and export.

Everything OTel-specific lives here, behind a tiny interface, so the request path stays readable
and costs nothing when tracing is off:

- the ext_proc stream calls :meth:`Tracing.start_request` at the request headers: it continues
  the caller's trace (W3C ``traceparent``/``tracestate`` and ``baggage``) with a
  ``gateway.request`` span and writes that span's context back into the headers, which the
  picker echoes to Envoy, so the model server's spans join the same trace. The stream wraps
  the pipeline's route in :func:`activated`, and ends the span with the stream;
- the request pipeline and the scheduler open children with :func:`span`, which reads the active
  request from a ContextVar and returns a shared no-op context manager when there is none.

So with ``--tracing=false``, or with tracing on but no exporter configured, no tracer exists,
the OTel SDK is never imported, and a request costs one ``ContextVar.get`` per would-be span;
likewise, a request whose ``gateway.request`` span the sampler dropped creates no children.
Spans are exported by the SDK's ``BatchSpanProcessor`` from its own thread; :meth:`Tracing.shutdown`
flushes them at stop, waiting a bounded time.

Span names, kinds, attributes and instrumentation scopes are upstream's (llm-d router,
``pkg/common/observability/tracing``, ``pkg/epp/handlers``, ``requestcontrol``, ``scheduling``).
The environment rule (documented in docs/deploy.md, "Tracing"), decided by
:meth:`TracingSettings.from_environ`:

- ``OTEL_TRACES_EXPORTER`` is a comma list of ``otlp``, ``console`` and ``none``; unset, it
  means ``otlp`` when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
  is set, else no exporter (upstream prints spans to stdout instead). No exporter: one log line
  at start, and requests are not traced (a client's ``traceparent`` passes through unchanged);
- OTLP over ``grpc`` (upstream's only transport, the default) or ``http/protobuf``, from
  ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``; the exporters read
  the other ``OTEL_EXPORTER_OTLP_*`` variables (endpoint, headers, TLS, timeout) themselves;
  with no endpoint set, gRPC goes to plaintext ``localhost:4317`` as upstream's fallback does;
- sampler from ``OTEL_TRACES_SAMPLER`` (default ``parentbased_traceidratio``, upstream's) and
  ``OTEL_TRACES_SAMPLER_ARG`` (default 0.1); the standard OTel sampler names are accepted;
- resource ``service.name`` ``llm-d-epp`` and ``service.version``, overridden by
  ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``.

A value that cannot be honoured (an unknown exporter, sampler or protocol, a bad ratio) is a
:class:`TracingError` at start, naming the variable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import epp

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.sampling import Sampler
    from opentelemetry.trace import Span as OtelSpan
    from opentelemetry.trace import Tracer

__all__ = [
    "DEFAULT_SERVICE_NAME",
    "FLUSH_TIMEOUT",
    "HANDLERS_SCOPE",
    "REQUEST_CONTROL_SCOPE",
    "SCHEDULING_SCOPE",
    "RequestTrace",
    "Span",
    "Tracing",
    "TracingError",
    "TracingSettings",
    "activated",
    "span",
]

log = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "llm-d-epp"
"""``service.name`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` say otherwise (upstream's)."""

HANDLERS_SCOPE = "llm-d-router/pkg/epp/handlers"
REQUEST_CONTROL_SCOPE = "llm-d-router/pkg/epp/requestcontrol"
SCHEDULING_SCOPE = "llm-d-router/pkg/epp/scheduling"
_SCOPES = (HANDLERS_SCOPE, REQUEST_CONTROL_SCOPE, SCHEDULING_SCOPE)

FLUSH_TIMEOUT = 5.0
"""Seconds :meth:`Tracing.shutdown` waits for the last spans to be exported."""

_REQUEST_SPAN = "gateway.request"

_EXPORTERS = frozenset({"otlp", "console", "none"})
_PROTOCOLS = frozenset({"grpc", "http/protobuf"})
_RATIO_SAMPLERS = frozenset({"traceidratio", "parentbased_traceidratio"})
_FIXED_SAMPLERS = frozenset({"always_on", "always_off", "parentbased_always_on", "parentbased_always_off"})
_DEFAULT_SAMPLER = "parentbased_traceidratio"
_DEFAULT_RATIO = 0.1


class TracingError(ValueError):
    """The tracing the ``OTEL_*`` variables ask for cannot be set up here; the message names why."""


AttributeValue = str | bool | int | float | Sequence[str] | Sequence[float]


class Span(Protocol):
    """What the request path may do with a span: annotate it (OTel's ``Span`` is one)."""

    def set_attribute(self, key: str, value: AttributeValue) -> None: ...


_NO_SPAN: AbstractContextManager[None] = contextlib.nullcontext()

_active: ContextVar[Tracing | None] = ContextVar("epp_tracing", default=None)
"""The tracing of the request being routed in this context; set only inside :func:`activated`."""


def span(name: str, scope: str, *, server: bool = False) -> AbstractContextManager[Span | None]:
    """A child span of the active request's trace (current while the ``with`` runs), or ``None``.

    ``None`` when no traced request is being routed here: then this is one ContextVar read and
    a shared no-op context manager. An exception leaving the block marks the span as an error.
    """
    tracing = _active.get()
    if tracing is None:
        return _NO_SPAN
    return tracing.child_span(name, scope, server=server)


def activated(trace: RequestTrace | None) -> AbstractContextManager[None]:
    """Make ``trace`` the parent of the :func:`span` calls made inside the ``with`` (no-op for None)."""
    if trace is None:
        return _NO_SPAN
    return trace.activated()


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """What the ``OTEL_*`` environment asks for, validated; ``exporters`` empty = no tracing."""

    exporters: tuple[str, ...] = ()
    protocol: str = "grpc"
    sampler: str = _DEFAULT_SAMPLER
    ratio: float = _DEFAULT_RATIO

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> TracingSettings:
        """Apply the rule in this module's docstring; raises :class:`TracingError`."""
        raw = environ.get("OTEL_TRACES_EXPORTER", "").strip()
        if raw:
            names = [name.strip().lower() for name in raw.split(",") if name.strip()]
            unknown = sorted(set(names) - _EXPORTERS)
            if unknown:
                raise TracingError(
                    f"OTEL_TRACES_EXPORTER: unsupported exporter(s) {unknown}; use otlp, console or none"
                )
            exporters = tuple(dict.fromkeys(name for name in names if name != "none"))
        elif environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            exporters = ("otlp",)
        else:
            exporters = ()
        protocol_var = (
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
            if environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            else "OTEL_EXPORTER_OTLP_PROTOCOL"
        )
        protocol = environ.get(protocol_var, "").strip().lower() or "grpc"
        if "otlp" in exporters and protocol not in _PROTOCOLS:
            raise TracingError(f"{protocol_var}: unsupported protocol {protocol!r}; use grpc or http/protobuf")
        sampler = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower() or _DEFAULT_SAMPLER
        if sampler not in _RATIO_SAMPLERS and sampler not in _FIXED_SAMPLERS:
            known = ", ".join(sorted(_RATIO_SAMPLERS | _FIXED_SAMPLERS))
            raise TracingError(f"OTEL_TRACES_SAMPLER: unsupported sampler {sampler!r}; use one of {known}")
        ratio = _DEFAULT_RATIO
        arg = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
        if sampler in _RATIO_SAMPLERS and arg:
            try:
                ratio = float(arg)
            except ValueError:
                ratio = -1.0
            if not 0.0 <= ratio <= 1.0:
                raise TracingError(f"OTEL_TRACES_SAMPLER_ARG: {sampler} needs a ratio in [0, 1], got {arg!r}")
        return cls(exporters=exporters, protocol=protocol, sampler=sampler, ratio=ratio)


class Tracing:
    """The tracer provider of one ``epp serve``: built at start, :meth:`shutdown` at stop.

    The OTel SDK and exporter modules are imported here, so only when an exporter runs.
    """

    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry import context, trace
        from opentelemetry.baggage.propagation import W3CBaggagePropagator
        from opentelemetry.context import Context
        from opentelemetry.propagators.composite import CompositePropagator
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = provider
        self._tracers: dict[str, Tracer] = {scope: provider.get_tracer(scope, epp.__version__) for scope in _SCOPES}
        self._request_tracer = self._tracers[HANDLERS_SCOPE]
        self._propagator = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
        self._empty = Context()
        self._server = SpanKind.SERVER
        self._internal = SpanKind.INTERNAL
        self._set_span_in_context = trace.set_span_in_context
        self._attach = context.attach
        self._detach = context.detach
        self._status = Status
        self._error = StatusCode.ERROR

    @classmethod
    def from_environment(cls) -> Tracing | None:
        """The tracing the ``OTEL_*`` environment asks for; None (logged once) when it names no exporter.

        Blocking (imports, exporter set-up): call it off the event loop. Raises :class:`TracingError`.
        """
        settings = TracingSettings.from_environ(os.environ)
        if not settings.exporters:
            log.info(
                "tracing: no exporter configured, requests are not traced "
                "(set OTEL_EXPORTER_OTLP_ENDPOINT, or OTEL_TRACES_EXPORTER=otlp)"
            )
            return None
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(sampler=_sampler(settings), resource=_resource(), shutdown_on_exit=False)
        for name in settings.exporters:
            provider.add_span_processor(BatchSpanProcessor(_exporter(name, settings.protocol)))
        log.info(
            "tracing: exporting spans",
            extra={
                "exporters": list(settings.exporters),
                "protocol": settings.protocol if "otlp" in settings.exporters else "",
                "sampler": settings.sampler,
                "ratio": settings.ratio if settings.sampler in _RATIO_SAMPLERS else None,
            },
        )
        return cls(provider)

    def start_request(self, headers: Mapping[str, str], upstream: MutableMapping[str, str]) -> RequestTrace:
        """Start the ``gateway.request`` span, continuing the trace in ``headers`` (lower-case keys).

        Writes the span's own ``traceparent`` (and ``tracestate``, ``baggage``) into ``upstream``,
        the headers the picker sets on the forwarded request, so the model server gets it.
        """
        parent = self._propagator.extract(headers, context=self._empty)
        request_span = self._request_tracer.start_span(_REQUEST_SPAN, context=parent, kind=self._server)
        context = self._set_span_in_context(request_span, parent)
        self._propagator.inject(upstream, context=context)
        return RequestTrace(self, request_span, context)

    def child_span(self, name: str, scope: str, *, server: bool) -> AbstractContextManager[Span]:
        """A span under the current OTel context, current itself while the ``with`` runs."""
        kind = self._server if server else self._internal
        return self._tracers[scope].start_as_current_span(name, kind=kind)

    async def shutdown(self, timeout: float = FLUSH_TIMEOUT) -> None:
        """Export the queued spans and stop the exporters, waiting at most ``timeout`` seconds.

        The SDK's shutdown blocks (it joins the export thread, and an unreachable collector is
        retried), so it runs on a daemon thread: neither the event loop nor the process's exit
        waits on it past the bound.
        """
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()

        def run() -> None:
            try:
                self._provider.shutdown()
            except Exception:
                log.exception("tracing: shutting the exporters down failed")
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
                    loop.call_soon_threadsafe(_resolve, finished)

        threading.Thread(target=run, name="epp-tracing-shutdown", daemon=True).start()
        try:
            await asyncio.wait_for(finished, timeout)
        except TimeoutError:
            log.warning("tracing: spans not exported within the shutdown bound are lost", extra={"timeout": timeout})


class RequestTrace:
    """The ``gateway.request`` span of one ext_proc stream: started at the request headers, ended with the stream."""

    __slots__ = ("_context", "_span", "_tracing")

    def __init__(self, tracing: Tracing, request_span: OtelSpan, context: Context) -> None:
        self._tracing = tracing
        self._span = request_span
        self._context = context

    @contextlib.contextmanager
    def _activated(self) -> Iterator[None]:
        tracing = self._tracing
        token = tracing._attach(self._context)
        active = _active.set(tracing)
        try:
            yield
        finally:
            _active.reset(active)
            tracing._detach(token)

    def activated(self) -> AbstractContextManager[None]:
        """Parent the :func:`span` calls made inside the ``with`` (none if the sampler dropped this request)."""
        if not self._span.is_recording():
            return _NO_SPAN
        return self._activated()

    def fail(self, description: str) -> None:
        """Mark the request as failed (status Error with ``description``); the last call wins."""
        self._span.set_status(self._tracing._status(self._tracing._error, description))

    def end(self) -> None:
        """End the span (once; later calls are ignored by the SDK)."""
        self._span.end()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _sampler(settings: TracingSettings) -> Sampler:
    from opentelemetry.sdk.trace import sampling

    name = settings.sampler
    base: Sampler
    if name in _RATIO_SAMPLERS:
        base = sampling.TraceIdRatioBased(settings.ratio)
    else:
        base = sampling.ALWAYS_OFF if name.endswith("always_off") else sampling.ALWAYS_ON
    return sampling.ParentBased(base) if name.startswith("parentbased_") else base


_OTLP_COMMON = "opentelemetry/proto/common/v1/common_pb2.py"


def _require_current_otlp_messages() -> None:
    """Refuse, naming who overwrote them and the fix, when opentelemetry-proto's modules are an older copy.

    epp depends on nothing else that ships ``opentelemetry/proto/...``, but a distribution installed
    beside it may (xds-protos does): whichever pip installs last owns the files, and the OTLP
    exporter cannot import from a copy that lacks ``InstrumentationScope``.
    """
    from opentelemetry.proto.common.v1 import common_pb2

    if hasattr(common_pb2, "InstrumentationScope"):
        return
    others = _other_owners(_OTLP_COMMON)
    culprit = f"installed over it by {', '.join(others)}" if others else "no other installed distribution claims it"
    raise TracingError(
        f"OTLP export needs opentelemetry-proto's messages, but {common_pb2.__file__} is an older copy ({culprit}); "
        "run: pip install --no-deps --force-reinstall opentelemetry-proto"
    )


def _other_owners(path: str) -> list[str]:
    """``name version`` of each installed distribution but opentelemetry-proto whose RECORD lists ``path``."""
    import importlib.metadata

    owners = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower() != "opentelemetry-proto" and any(str(f) == path for f in dist.files or ()):
            owners.add(f"{name} {dist.version}")
    return sorted(owners)


def _resource() -> Resource:
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, OTELResourceDetector, Resource

    defaults = Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME, SERVICE_VERSION: epp.__version__})
    return defaults.merge(OTELResourceDetector().detect())


def _exporter(name: str, protocol: str) -> SpanExporter:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stdout)  # today's stdout, not the one at the SDK's import
    _require_current_otlp_messages()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    return GrpcExporter()
