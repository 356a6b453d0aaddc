"""``ServeOptions``: the flags of ``epp serve``, validated once when built.

Flag names and defaults are upstream's (LDR ``pkg/epp/server/options.go``, GIE for the flags only
it had); durations accept Go syntax (``50ms``, ``2s``, ``1m30s``) or plain seconds. Each concern
that several flags configure has its own frozen group (logging, TLS, the metrics endpoint, model
server scraping), so the part that honours them takes just its group. Errors name the flag and
the bad value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from epp.config.tls_policy import TlsPolicyError, check_min_version, openssl_cipher_list
from epp.durations import parse_duration
from epp.framework.replication import SyncSettings
from epp.labels import Selector, SelectorError, parse_selector
from epp.telemetry.families import METRICS_NAMINGS, MetricsNaming

__all__ = [
    "LEASE_NAME_STYLES",
    "METRICS_NAMINGS",
    "V1ALPHA2_GROUP",
    "V1_GROUP",
    "LeaseNameStyle",
    "LoggingOptions",
    "MetricsEndpointOptions",
    "MetricsNaming",
    "ModelServerMetricsOptions",
    "OptionsError",
    "ServeOptions",
    "TlsOptions",
    "parse_duration_flag",
    "parse_ports",
]

V1_GROUP = "inference.networking.k8s.io"
V1ALPHA2_GROUP = "inference.networking.x-k8s.io"
MIN_REFRESH_METRICS_INTERVAL = 0.05

LeaseNameStyle = Literal["gie", "llm-d"]
"""Whose Lease name ``--ha-enable-leader-election`` uses (``--ha-lease-name-style``)."""
LEASE_NAME_STYLES: tuple[LeaseNameStyle, ...] = ("gie", "llm-d")


class OptionsError(ValueError):
    """A flag value that cannot be used; the message names the flag."""


def parse_duration_flag(text: str, *, flag: str) -> float:
    """A Go-style duration flag value in seconds; the error names the flag."""
    try:
        return parse_duration(text)
    except ValueError:
        raise OptionsError(f"--{flag}: invalid duration {text!r} (use e.g. 50ms, 2s, 1m)") from None


def parse_ports(text: str, *, flag: str = "endpoint-target-ports") -> tuple[int, ...]:
    """Comma-separated list of 1..8 TCP ports; duplicates are dropped, as upstream does."""
    ports: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.isdigit() or not 0 < int(part) < 65536:
            raise OptionsError(f"--{flag}: invalid port {part!r}")
        if int(part) not in ports:
            ports.append(int(part))
    if not 1 <= len(ports) <= 8:
        raise OptionsError(f"--{flag}: need 1 to 8 ports, got {len(ports)}")
    return tuple(ports)


@dataclass(frozen=True)
class LoggingOptions:
    """``-v`` and the ``--zap-*`` flags (controller-runtime's names), mapped onto our logging.

    ``zap_log_level`` overrides ``-v`` when set (``debug``, ``info``, ``error``, ``panic``, or a
    positive integer n meaning verbosity n). ``zap_encoder`` ``json`` writes JSON lines;
    ``console`` (the default, as upstream's development mode) writes ``key=value`` lines.
    """

    verbosity: int = 2
    zap_log_level: str = ""
    zap_encoder: Literal["json", "console"] = "console"
    zap_devel: bool = True
    zap_stacktrace_level: str = ""
    zap_time_encoding: str = ""

    def __post_init__(self) -> None:
        if self.verbosity < 0:
            object.__setattr__(self, "verbosity", 2)  # upstream: a negative -v becomes the default
        if self.zap_encoder not in ("json", "console"):
            raise OptionsError(f"--zap-encoder: must be json or console, got {self.zap_encoder!r}")
        level = self.zap_log_level
        if level and level not in ("debug", "info", "error", "panic") and not (level.isdigit() and int(level) > 0):
            raise OptionsError(f"--zap-log-level: must be debug, info, error, panic or an integer > 0, got {level!r}")
        if self.zap_stacktrace_level not in ("", "info", "error", "panic"):
            raise OptionsError(
                f"--zap-stacktrace-level: must be info, error or panic, got {self.zap_stacktrace_level!r}"
            )
        encodings = ("", "epoch", "millis", "nano", "iso8601", "rfc3339", "rfc3339nano")
        if self.zap_time_encoding not in encodings:
            raise OptionsError(
                f"--zap-time-encoding: must be one of {', '.join(encodings[1:])}, got {self.zap_time_encoding!r}"
            )


@dataclass(frozen=True)
class TlsOptions:
    """TLS on the ext_proc port: ``--secure-serving``, ``--cert-path``, reload, version and ciphers."""

    secure_serving: bool = True
    cert_path: str = ""
    cert_reload: bool = False
    min_version: str = ""  # Go's name, e.g. VersionTLS12
    cipher_suites: tuple[str, ...] = ()  # Go's (IANA) names

    def __post_init__(self) -> None:
        if self.cert_path and not self.secure_serving:
            raise OptionsError("--cert-path needs --secure-serving=true")
        if self.cert_reload and not self.cert_path:
            raise OptionsError("--enable-cert-reload needs --cert-path")
        try:  # what grpc python can enforce: see epp/config/tls_policy.py
            check_min_version(self.min_version)
            openssl_cipher_list(self.cipher_suites)
        except TlsPolicyError as e:
            raise OptionsError(str(e)) from e

    @property
    def grpc_cipher_list(self) -> str:
        """``--tls-cipher-suites`` as grpc core's ``GRPC_SSL_CIPHER_SUITES`` value (``""``: grpc's default)."""
        return openssl_cipher_list(self.cipher_suites)


@dataclass(frozen=True)
class MetricsEndpointOptions:
    """The picker's own ``/metrics`` server: port, authentication, TLS and pprof."""

    port: int = 9090
    auth: bool = True
    cert_dir: str = ""
    client_ca_file: str = ""
    pprof: bool = True

    def __post_init__(self) -> None:
        if self.client_ca_file and not self.cert_dir:
            raise OptionsError("--metrics-client-ca-file requires --metrics-cert-dir")
        if self.cert_dir and not self.client_ca_file and not self.auth:
            raise OptionsError(
                "--metrics-cert-dir enables metrics TLS without authentication; "
                "set --metrics-client-ca-file or --metrics-endpoint-auth"
            )


@dataclass(frozen=True)
class ModelServerMetricsOptions:
    """How model servers are scraped: GIE's ``--model-server-metrics-*`` and the metric-name flags.

    A metric-name field of None is not set (the engine's own names apply); an empty string turns
    that metric off, as the GIE chart does for LoRA on Triton and trtllm-serve. Their syntax is
    checked where the flags are read (``flags.py``): the parser lives in the data layer, which
    this module must not import.
    """

    scheme: Literal["http", "https"] = "http"
    path: str = "/metrics"
    port: int | None = None
    https_insecure_skip_verify: bool = True
    queued_requests_metric: str | None = None
    running_requests_metric: str | None = None
    kv_cache_usage_metric: str | None = None
    lora_info_metric: str | None = None
    cache_info_metric: str | None = None

    def __post_init__(self) -> None:
        if self.scheme not in ("http", "https"):
            raise OptionsError(f"--model-server-metrics-scheme: must be http or https, got {self.scheme!r}")
        if not self.path.startswith("/"):
            raise OptionsError(f"--model-server-metrics-path: must start with '/', got {self.path!r}")
        if self.port is not None and not 0 < self.port < 65536:
            raise OptionsError(f"--model-server-metrics-port: invalid port {self.port}")


@dataclass(frozen=True)
class ServeOptions:
    """Everything ``epp serve`` needs, immutable once validated."""

    pool_names: tuple[str, ...] = ()
    pool_namespace: str = ""
    pool_group: str = V1_GROUP
    endpoint_selector: str = ""
    endpoint_target_ports: tuple[int, ...] = ()
    bind_address: str = "0.0.0.0"
    grpc_port: int = 9002
    grpc_health_port: int = 9003
    grpc_max_recv_msg_size: int | None = None
    grpc_max_send_msg_size: int | None = None
    health_checking: bool = False
    drain_timeout: float = 30.0
    config_file: str = ""
    config_text: str = ""
    allow_experimental_plugins: bool = False
    refresh_metrics_interval: float = MIN_REFRESH_METRICS_INTERVAL
    metrics_scrape_process: bool = False
    workers: int = 1
    """Serving processes sharing the ext_proc port (``--workers``); 1: this process alone (see epp.workers)."""
    refresh_prometheus_metrics_interval: float = 5.0
    metrics_staleness_threshold: float = 2.0
    kubeconfig: str = ""
    max_request_body_bytes: int = 16 * 1024 * 1024
    disable_endpoint_subset_filter: bool = False
    emit_endpoint_scores: bool = False
    enable_grpc_stream_metrics: bool = False
    conformance_test_hooks: bool = False
    leader_election: bool = False
    state_sync: SyncSettings | None = None
    """Where the pool's replicas share state (``--state-sync-address``); None: each routes on its own view."""
    lease_name_style: LeaseNameStyle = "gie"
    metrics_naming: MetricsNaming = "both"
    tracing: bool = True
    epp_api: bool = True
    """The ``epp.v1`` API (Endpoints, Explain, Config) on the health port, guarded as ``/metrics``."""
    epp_api_port: int = 9004
    """The API's own port when ``--metrics-cert-dir`` puts it behind the metrics TLS."""
    logging: LoggingOptions = field(default_factory=LoggingOptions)
    tls: TlsOptions = field(default_factory=TlsOptions)
    metrics_endpoint: MetricsEndpointOptions = field(default_factory=MetricsEndpointOptions)
    model_server_metrics: ModelServerMetricsOptions = field(default_factory=ModelServerMetricsOptions)
    selector: Selector = field(init=False, default_factory=Selector)

    def __post_init__(self) -> None:
        configured = bool(self.config_file or self.config_text)  # its dataLayer.discovery may list the endpoints
        named = bool(self.pool_names or self.endpoint_selector)
        if (self.pool_names and self.endpoint_selector) or not (named or configured):
            raise OptionsError("exactly one of --pool-name or --endpoint-selector must be set")
        if len(set(self.pool_names)) != len(self.pool_names):
            raise OptionsError(f"--pool-name: duplicate pool names {list(self.pool_names)}")
        if self.pool_group not in (V1_GROUP, V1ALPHA2_GROUP):
            raise OptionsError(f"--pool-group: must be {V1_GROUP} or {V1ALPHA2_GROUP}, got {self.pool_group!r}")
        if self.endpoint_selector:
            try:
                sel = parse_selector(self.endpoint_selector)
            except SelectorError as e:
                raise OptionsError(f"--endpoint-selector: {e}") from e
            if sel.empty:
                raise OptionsError("--endpoint-selector: selector matches every pod; name at least one label")
            object.__setattr__(self, "selector", sel)
            if not self.endpoint_target_ports:
                raise OptionsError("--endpoint-target-ports is required with --endpoint-selector")
        elif self.endpoint_target_ports:
            raise OptionsError("--endpoint-target-ports is only valid with --endpoint-selector")
        for flag, port in (
            ("grpc-port", self.grpc_port),
            ("grpc-health-port", self.grpc_health_port),
            ("metrics-port", self.metrics_endpoint.port),
            ("epp-api-port", self.epp_api_port),
        ):
            if not 0 <= port < 65536:
                raise OptionsError(f"--{flag}: invalid port {port}")
        for flag, size in (
            ("grpc-max-recv-msg-size", self.grpc_max_recv_msg_size),
            ("grpc-max-send-msg-size", self.grpc_max_send_msg_size),
        ):
            if size is not None and size < 0:
                raise OptionsError(f"--{flag}: must be non-negative, got {size}")
        if self.config_file and self.config_text:
            raise OptionsError("--config-file and --config-text are mutually exclusive")
        if not 1 <= self.workers <= 64:
            raise OptionsError(f"--workers: must be between 1 and 64, got {self.workers}")
        if self.refresh_metrics_interval <= 0:
            raise OptionsError(f"--refresh-metrics-interval must be > 0, got {self.refresh_metrics_interval}")
        if self.refresh_prometheus_metrics_interval <= 0:
            raise OptionsError(
                f"--refresh-prometheus-metrics-interval must be > 0, got {self.refresh_prometheus_metrics_interval}"
            )
        if self.metrics_staleness_threshold <= 0:
            raise OptionsError(f"--metrics-staleness-threshold must be > 0, got {self.metrics_staleness_threshold}")
        if self.drain_timeout < 0:
            raise OptionsError(f"--drain-timeout must be >= 0, got {self.drain_timeout}")
        if self.lease_name_style not in LEASE_NAME_STYLES:
            raise OptionsError(
                f"--ha-lease-name-style: must be one of {list(LEASE_NAME_STYLES)}, got {self.lease_name_style!r}"
            )
        if self.metrics_naming not in METRICS_NAMINGS:
            raise OptionsError(f"--metrics-naming: must be one of {list(METRICS_NAMINGS)}, got {self.metrics_naming!r}")
        if self.max_request_body_bytes <= 0:
            raise OptionsError(f"--max-request-body-bytes must be > 0, got {self.max_request_body_bytes}")
        if not self.pool_namespace:
            object.__setattr__(self, "pool_namespace", os.environ.get("NAMESPACE") or "default")

    @property
    def standalone(self) -> bool:
        return bool(self.endpoint_selector)
