"""The Envoy bootstrap in front of the picker: the ext_proc filter and ORIGINAL_DST routing.

The GIE data plane in one file, for `epp dev`, the benchmarks and the end-to-end tests: a listener
whose ``envoy.filters.http.ext_proc`` filter calls the picker on every request, and an
``ORIGINAL_DST`` cluster that sends the request to whatever ``ip:port`` the picker named in
``x-gateway-destination-endpoint``. Every Envoy fact relied on here was verified against Envoy
1.40 (see the platform notes): metadata from the processor is dropped unless the filter lists
``envoy.lb`` as a receiving namespace; FULL_DUPLEX_STREAMED needs every body chunk answered;
BUFFERED bodies over 1 MiB get 413; a processor that is down gives the client 500 when the filter
fails closed. Pure: builds dictionaries, starts nothing (:mod:`epp_sim.stack.envoy` runs them).

As the EPP protocol asks of a data plane, it reports to the picker, with each response, the
endpoint that served it (``envoy.lb`` / ``x-gateway-destination-endpoint-served``): the route
adds that response header from ``%UPSTREAM_HOST%``, a ``header_to_metadata`` filter between the
processor and the router moves it into the ``envoy.lb`` metadata (the client never sees it), and
the ext_proc filter forwards that namespace, which Envoy sends only when it is listed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from epp.framework.headers import DESTINATION_ENDPOINT, DESTINATION_ENDPOINT_SERVED, LB_METADATA_NAMESPACE

__all__ = [
    "EXT_PROC_CLUSTER",
    "EXT_PROC_SERVICE",
    "GRACEFUL_CLOSE_GUARD",
    "BodyMode",
    "LISTENER",
    "EnvoyConfigError",
    "ExtProcTarget",
    "RouteBy",
    "envoy_bootstrap",
    "envoy_bootstrap_plain",
]

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"

BodyMode = Literal["NONE", "BUFFERED", "FULL_DUPLEX_STREAMED"]
RouteBy = Literal["metadata", "header"]

_BODY_MODES: frozenset[str] = frozenset({"NONE", "BUFFERED", "FULL_DUPLEX_STREAMED"})
LISTENER = "inference"  # the listener name EnvoyProcess reads its bound port from
EXT_PROC_CLUSTER = "ext_proc"  # the cluster whose health EnvoyProcess waits for
_ORIGINAL_DST_CLUSTER = "original_destination"
_BACKEND_CLUSTER = "backend"
# Envoy's default circuit breakers allow 1,024 concurrent requests per cluster; long LLM streams
# (and the one ext_proc stream per request) would queue behind that on a busy gateway.
_CIRCUIT_BREAKERS: dict[str, Any] = {
    "thresholds": [
        {"max_connections": 100_000, "max_pending_requests": 100_000, "max_requests": 100_000, "max_retries": 16}
    ]
}


GRACEFUL_CLOSE_GUARD = "envoy.reloadable_features.ext_proc_graceful_grpc_close"
"""Envoy's runtime guard (off by default, since 1.34) for a graceful end of ext_proc streams."""


class EnvoyConfigError(ValueError):
    """A bootstrap that cannot work (bad option combination, or rejected by ``envoy --mode validate``)."""


@dataclass(frozen=True, slots=True)
class ExtProcTarget:
    """Where the picker (or any ext_proc server) listens; a hostname is resolved by DNS."""

    host: str
    port: int

    def __post_init__(self) -> None:
        if not self.host:
            raise EnvoyConfigError("ExtProcTarget.host must not be empty")
        _check_port(self.port, "ExtProcTarget.port", allow_zero=False)


def envoy_bootstrap(
    *,
    listen_port: int,
    ext_proc: ExtProcTarget | Sequence[ExtProcTarget] | None,
    admin_port: int,
    failure_mode_allow: bool = False,
    tls_to_processor: bool = False,
    route_by: RouteBy = "metadata",
    request_body_mode: BodyMode = "FULL_DUPLEX_STREAMED",
    response_body_mode: BodyMode = "FULL_DUPLEX_STREAMED",
    message_timeout_s: float = 1000.0,
    grpc_timeout_s: float = 10.0,
    health_check_service: str | None = EXT_PROC_SERVICE,
    listen_host: str = "127.0.0.1",
    max_downstream_connections: int = 50_000,
    graceful_ext_proc_close: bool = True,
    ext_proc_streams_per_connection: int | None = None,
) -> dict[str, Any]:
    """A complete Envoy v3 bootstrap: listener → ext_proc filter → ORIGINAL_DST cluster.

    Port 0 for ``listen_port`` or ``admin_port`` lets the kernel choose (``EnvoyProcess`` reports
    the real ports). The defaults are the GIE mode: all headers and trailers sent, both bodies
    FULL_DUPLEX_STREAMED, ``message_timeout`` 1000 s, gRPC timeout 10 s.

    ``failure_mode_allow=False`` (the default, GIE's FailClose) answers 500 while the picker is
    unreachable. True (BUFFERED bodies only: Envoy 1.40 ignores it and fails closed with
    FULL_DUPLEX_STREAMED, so that combination is refused) lets requests past the filter without
    a routing decision, and the ORIGINAL_DST cluster then answers 503 "no healthy upstream".
    Fail-open therefore only helps a gateway with another route to the pool; a dead picker is an
    outage either way, which is why the picker runs with several replicas.

    ``route_by="metadata"`` routes on the processor's dynamic metadata ``envoy.lb`` →
    ``x-gateway-destination-endpoint`` (a client cannot forge it); ``"header"`` routes on the
    request header the processor sets.

    ``ext_proc`` may list several processors (active-active ``epp serve`` replicas): they become
    the endpoints of one ext_proc cluster, balanced round robin per stream (one stream is one
    request) and each health-checked, so a replica that stops answering leaves the rotation.

    ``ext_proc=None`` leaves the filter out: requests then route on the client's own
    ``x-gateway-destination-endpoint`` header, so it requires ``route_by="header"``.

    ``tls_to_processor`` speaks TLS to the picker without verifying its certificate (the picker
    generates a self-signed one unless given ``--cert-path``), with ALPN ``h2``.

    ``health_check_service`` is the gRPC health service Envoy probes on the processor's port
    (upstream's ``--health-checking`` serves ``envoy.service.ext_proc.v3.ExternalProcessor``);
    None turns active health checking off.

    ``graceful_ext_proc_close`` sets the runtime guard :data:`GRACEFUL_CLOSE_GUARD`: Envoy then
    half-closes a finished ext_proc stream and lets the processor end it, instead of resetting it
    (a reset races the processor's final status, and grpc.aio leaks a little memory on each lost
    race). False is a stock Envoy, for the benchmarks' comparison.

    ``ext_proc_streams_per_connection`` caps the streams Envoy puts on one connection to the
    processor, so it opens a connection per that many concurrent requests (the setting
    docs/deploy.md recommends for ``epp serve --workers``); None: Envoy's default, no cap.
    """
    _check_port(listen_port, "listen_port")
    _check_port(admin_port, "admin_port")
    for name, mode in (("request_body_mode", request_body_mode), ("response_body_mode", response_body_mode)):
        if mode not in _BODY_MODES:
            raise EnvoyConfigError(f"{name} must be one of {sorted(_BODY_MODES)}, got {mode!r}")
    if route_by not in ("metadata", "header"):
        raise EnvoyConfigError(f"route_by must be 'metadata' or 'header', got {route_by!r}")
    if failure_mode_allow and "FULL_DUPLEX_STREAMED" in (request_body_mode, response_body_mode):
        raise EnvoyConfigError(
            "failure_mode_allow has no effect with FULL_DUPLEX_STREAMED bodies (Envoy fails closed); "
            "use BUFFERED bodies for a fail-open gateway"
        )
    targets = _targets(ext_proc)
    if not targets and route_by != "header":
        raise EnvoyConfigError("without an ext_proc processor nothing sets the routing metadata; use route_by='header'")

    http_filters: list[dict[str, Any]] = []
    clusters: list[dict[str, Any]] = [_original_dst_cluster(route_by)]
    response_headers: list[dict[str, Any]] = []
    if targets:
        http_filters.append(
            _ext_proc_filter(
                failure_mode_allow=failure_mode_allow,
                request_body_mode=request_body_mode,
                response_body_mode=response_body_mode,
                message_timeout_s=message_timeout_s,
                grpc_timeout_s=grpc_timeout_s,
            )
        )
        http_filters.append(_served_endpoint_to_metadata_filter())
        response_headers.append(_SERVED_ENDPOINT_HEADER)
        clusters.append(
            _ext_proc_cluster(
                targets,
                tls=tls_to_processor,
                health_check_service=health_check_service,
                streams_per_connection=ext_proc_streams_per_connection,
            )
        )
    http_filters.append(_router_filter())
    return _bootstrap(
        listener=_listener(
            listen_host, listen_port, http_filters, _ORIGINAL_DST_CLUSTER, response_headers=response_headers
        ),
        clusters=clusters,
        admin_port=admin_port,
        max_downstream_connections=max_downstream_connections,
        runtime={GRACEFUL_CLOSE_GUARD: True} if graceful_ext_proc_close else {},
    )


def envoy_bootstrap_plain(
    listen_port: int,
    backend_host: str,
    backend_port: int,
    admin_port: int,
    *,
    listen_host: str = "127.0.0.1",
    max_downstream_connections: int = 50_000,
) -> dict[str, Any]:
    """Envoy straight to one static backend, no processor: the benchmark's baseline."""
    _check_port(listen_port, "listen_port")
    _check_port(admin_port, "admin_port")
    _check_port(backend_port, "backend_port", allow_zero=False)
    backend = {
        "name": _BACKEND_CLUSTER,
        "type": _discovery_type(backend_host),
        "connect_timeout": "5s",
        "circuit_breakers": _CIRCUIT_BREAKERS,
        "load_assignment": _load_assignment(_BACKEND_CLUSTER, [(backend_host, backend_port)]),
    }
    return _bootstrap(
        listener=_listener(listen_host, listen_port, [_router_filter()], _BACKEND_CLUSTER),
        clusters=[backend],
        admin_port=admin_port,
        max_downstream_connections=max_downstream_connections,
    )


def _bootstrap(
    *,
    listener: dict[str, Any],
    clusters: list[dict[str, Any]],
    admin_port: int,
    max_downstream_connections: int,
    runtime: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "admin": {"address": _socket_address("127.0.0.1", admin_port)},
        # An admin layer lets `/runtime_modify` switch features (e.g. access logs) on a live Envoy.
        "layered_runtime": {
            "layers": [{"name": "static", "static_layer": dict(runtime or {})}, {"name": "admin", "admin_layer": {}}]
        },
        "static_resources": {"listeners": [listener], "clusters": clusters},
        # A bound on downstream connections, so a connection flood degrades instead of exhausting fds.
        "overload_manager": {
            "resource_monitors": [
                {
                    "name": "envoy.resource_monitors.global_downstream_max_connections",
                    "typed_config": {
                        "@type": "type.googleapis.com/"
                        "envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                        "max_active_downstream_connections": max_downstream_connections,
                    },
                }
            ]
        },
    }


def _listener(
    host: str,
    port: int,
    http_filters: list[dict[str, Any]],
    cluster: str,
    *,
    response_headers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    # timeout 0: no overall deadline, a long generation streams as long as it needs.
    route: dict[str, Any] = {"match": {"prefix": "/"}, "route": {"cluster": cluster, "timeout": "0s"}}
    if response_headers:
        route["response_headers_to_add"] = response_headers
    hcm = {
        "@type": "type.googleapis.com/"
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": LISTENER,
        "codec_type": "AUTO",
        "route_config": {
            "name": LISTENER,
            "virtual_hosts": [
                {
                    "name": LISTENER,
                    "domains": ["*"],
                    "routes": [route],
                }
            ],
        },
        "http_filters": http_filters,
    }
    return {
        "name": LISTENER,
        "address": _socket_address(host, port),
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}
        ],
    }


def _ext_proc_filter(
    *,
    failure_mode_allow: bool,
    request_body_mode: BodyMode,
    response_body_mode: BodyMode,
    message_timeout_s: float,
    grpc_timeout_s: float,
) -> dict[str, Any]:
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": EXT_PROC_CLUSTER}, "timeout": _duration(grpc_timeout_s)},
            "failure_mode_allow": failure_mode_allow,
            "message_timeout": _duration(message_timeout_s),
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND",
                "request_body_mode": request_body_mode,
                "response_body_mode": response_body_mode,
                "request_trailer_mode": "SEND",
                "response_trailer_mode": "SEND",
            },
            # Without receiving, Envoy silently drops the picker's envoy.lb routing metadata; without
            # forwarding, the picker never hears which endpoint served the response.
            "metadata_options": {
                "receiving_namespaces": {"untyped": [LB_METADATA_NAMESPACE]},
                "forwarding_namespaces": {"untyped": [LB_METADATA_NAMESPACE]},
            },
        },
    }


# The router sets it on every response (the upstream host is known by then); it is set before the
# filters above the router see the response.
_SERVED_ENDPOINT_HEADER: dict[str, Any] = {
    "header": {"key": DESTINATION_ENDPOINT_SERVED, "value": "%UPSTREAM_HOST%"},
    "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
}


def _served_endpoint_to_metadata_filter() -> dict[str, Any]:
    """Response header ``x-gateway-destination-endpoint-served`` → ``envoy.lb`` metadata, header removed."""
    return {
        "name": "envoy.filters.http.header_to_metadata",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
            "response_rules": [
                {
                    "header": DESTINATION_ENDPOINT_SERVED,
                    "on_header_present": {
                        "metadata_namespace": LB_METADATA_NAMESPACE,
                        "key": DESTINATION_ENDPOINT_SERVED,
                        "type": "STRING",
                    },
                    "remove": True,
                }
            ],
        },
    }


def _router_filter() -> dict[str, Any]:
    return {
        "name": "envoy.filters.http.router",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
    }


def _original_dst_cluster(route_by: RouteBy) -> dict[str, Any]:
    lb_config: dict[str, Any]
    if route_by == "metadata":
        lb_config = {
            "metadata_key": {"key": LB_METADATA_NAMESPACE, "path": [{"key": DESTINATION_ENDPOINT}]},
        }
    else:
        lb_config = {"use_http_header": True, "http_header_name": DESTINATION_ENDPOINT}
    return {
        "name": _ORIGINAL_DST_CLUSTER,
        "type": "ORIGINAL_DST",
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": "5s",
        "circuit_breakers": _CIRCUIT_BREAKERS,
        "original_dst_lb_config": lb_config,
    }


def _targets(ext_proc: ExtProcTarget | Sequence[ExtProcTarget] | None) -> tuple[ExtProcTarget, ...]:
    """The processors as a tuple (empty: no filter); an empty list or a repeated target is refused."""
    if ext_proc is None:
        return ()
    targets = (ext_proc,) if isinstance(ext_proc, ExtProcTarget) else tuple(ext_proc)
    if not targets:
        raise EnvoyConfigError("ext_proc lists no processor; pass None to leave the filter out")
    if len(set(targets)) != len(targets):
        raise EnvoyConfigError(f"ext_proc lists a processor twice: {[f'{t.host}:{t.port}' for t in targets]}")
    return targets


def _ext_proc_cluster(
    targets: Sequence[ExtProcTarget], *, tls: bool, health_check_service: str | None, streams_per_connection: int | None
) -> dict[str, Any]:
    # A stream limit makes Envoy open a connection per that many concurrent streams: the kernel then
    # spreads them over the processes of an `epp serve --workers N` (it balances connections, not streams).
    http2: dict[str, Any] = {} if streams_per_connection is None else {"max_concurrent_streams": streams_per_connection}
    # STRICT_DNS resolves every name (an IP literal resolves to itself); STATIC takes IP literals only.
    names = any(_discovery_type(t.host) == "STRICT_DNS" for t in targets)
    cluster: dict[str, Any] = {
        "name": EXT_PROC_CLUSTER,
        "type": "STRICT_DNS" if names else "STATIC",
        # Per stream, i.e. per request: replicas share the requests evenly.
        "lb_policy": "ROUND_ROBIN",
        "connect_timeout": "5s",
        "circuit_breakers": _CIRCUIT_BREAKERS,
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": http2},
            }
        },
        "load_assignment": _load_assignment(EXT_PROC_CLUSTER, [(t.host, t.port) for t in targets]),
    }
    if health_check_service is not None:
        cluster["health_checks"] = [
            {
                "timeout": "1s",
                "interval": "2s",
                # Without it a failed first probe sticks for Envoy's 60 s no-traffic default.
                "no_traffic_interval": "2s",
                "unhealthy_threshold": 2,
                "healthy_threshold": 1,
                "grpc_health_check": {"service_name": health_check_service},
            }
        ]
    if tls:
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                # An empty validation context accepts the picker's self-signed certificate.
                "common_tls_context": {"alpn_protocols": ["h2"], "validation_context": {}},
            },
        }
    return cluster


def _load_assignment(cluster: str, addresses: Sequence[tuple[str, int]]) -> dict[str, Any]:
    endpoints = [{"endpoint": {"address": _socket_address(host, port)}} for host, port in addresses]
    return {"cluster_name": cluster, "endpoints": [{"lb_endpoints": endpoints}]}


def _socket_address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _discovery_type(host: str) -> str:
    """STATIC for an IP literal, STRICT_DNS for a name (a Kubernetes Service, say)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return "STRICT_DNS"
    return "STATIC"


def _duration(seconds: float) -> str:
    if seconds < 0:
        raise EnvoyConfigError(f"a duration must not be negative, got {seconds}")
    text = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return f"{text or '0'}s"


def _check_port(port: int, name: str, *, allow_zero: bool = True) -> None:
    low = 0 if allow_zero else 1
    if not isinstance(port, int) or isinstance(port, bool) or not low <= port <= 65535:
        raise EnvoyConfigError(f"{name} must be an integer in {low}..65535, got {port!r}")
