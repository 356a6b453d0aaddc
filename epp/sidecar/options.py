"""``epp sidecar``'s flags: the llm-d routing sidecar's names, defaults and YAML configuration, validated.

Upstream's flags (llm-d router ``pkg/sidecar/proxy/options.go``) with their defaults, booleans in
Go's spelling, durations in Go's syntax, lists comma-separated or repeated: ``--port`` (8000),
``--model-server-port`` (8200; ``--vllm-port`` is its deprecated alias), ``--data-parallel-size``
(1), ``--kv-connector`` (``nixlv2``), ``--ec-connector``, ``--enable-tls`` and
``--tls-insecure-skip-verify`` (stages ``prefiller``, ``decoder``, ``encoder``), ``--secure-proxy``
(true) and ``--cert-path``, ``--enable-ssrf-protection`` with ``--inference-pool`` (env
``INFERENCE_POOL``) and ``--pool-group``, ``--enable-prefiller-sampling`` (env
``ENABLE_PREFILLER_SAMPLING``), ``--prefill-max-retries`` (0) and ``--prefill-retry-backoff``
(200ms), ``--decode-chunk-size``, ``--p2p-connector-port`` (7777), ``--enable-p2p-pull``,
``--mooncake-bootstrap-port`` (8998), ``--max-idle-conns-per-host``, ``--tracing``,
``--metrics-port`` (0 = off), ``-v`` and the ``--zap-*`` logging flags, and ``--configuration``
/ ``--configuration-file``: the same keys as YAML (unknown keys refused), a flag given on the
command line winning over the file.

What is not built here is refused by name at start (exit 2), never accepted and ignored: the
``sglang``, ``mooncake`` and ``offloading`` connectors, every ``--ec-connector``,
``--enable-p2p-pull``, chunked decode (``--decode-chunk-size`` > 0) and the MoRI-IO
(``--moriio-*``) flags. ``--max-idle-conns-per-host`` (a Go transport knob) and ``--tracing`` are
accepted and logged once as having no effect.

Ours: ``--bind-address`` (0.0.0.0), ``--model-server-host`` (``localhost``: where the local engine
listens), ``--prefill-timeout`` (60s; upstream waits forever on a prefiller that stopped
answering), ``--local-prefill-fallback`` (true: a prefiller still failing after the retries is
replaced by a local prefill on the decode engine; false: its error goes to the client, as
upstream), and ``--kubeconfig`` for the SSRF allowlist's API access (default: ``$KUBECONFIG``,
else in-cluster).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from epp.config.go_flags import add_logging_flags, go_bool, logging_options_from_args
from epp.config.options import LoggingOptions
from epp.durations import parse_duration

__all__ = [
    "BUILT_KV_CONNECTORS",
    "STAGES",
    "SidecarOptions",
    "SidecarOptionsError",
    "add_sidecar_flags",
    "options_from_args",
]

NIXLV2 = "nixlv2"
SHARED_STORAGE = "shared-storage"
BUILT_KV_CONNECTORS = (NIXLV2, SHARED_STORAGE)
_UPSTREAM_KV_CONNECTORS = (NIXLV2, SHARED_STORAGE, "sglang", "mooncake", "offloading")
_UPSTREAM_EC_CONNECTORS = ("ec-example", "ec-nixl")
STAGES = ("prefiller", "decoder", "encoder")
_V1_GROUP = "inference.networking.k8s.io"
_POOL_GROUPS = (_V1_GROUP, "inference.networking.x-k8s.io")
_MAX_DATA_PARALLEL = 8
_MORIIO_FLAGS = (
    "write-mode", "decode-notify-port", "local-pod-ip", "decode-handshake-port", "parallel-dispatch",
    "parallel-decode-wait-timeout", "prefill-handshake-port", "prefill-notify-port", "tp-size", "dp-size",
    "remote-hosts", "dp-size-local", "decode-hosts",
)  # fmt: skip

# YAML key → (argparse dest, kind); the keys upstream's ``--configuration`` accepts.
_YAML_KEYS: Mapping[str, tuple[str, str]] = {
    "port": ("port", "int"),
    "model-server-port": ("model_server_port", "int"),
    "vllm-port": ("vllm_port", "int"),
    "mooncake-bootstrap-port": ("mooncake_bootstrap_port", "int"),
    "p2p-connector-port": ("p2p_connector_port", "int"),
    "data-parallel-size": ("data_parallel_size", "int"),
    "kv-connector": ("kv_connector", "str"),
    "ec-connector": ("ec_connector", "str"),
    "enable-ssrf-protection": ("enable_ssrf_protection", "bool"),
    "enable-prefiller-sampling": ("enable_prefiller_sampling", "bool"),
    "enable-p2p-pull": ("enable_p2p_pull", "bool"),
    "secure-proxy": ("secure_proxy", "bool"),
    "cert-path": ("cert_path", "str"),
    "enable-tls": ("enable_tls", "list"),
    "tls-insecure-skip-verify": ("tls_insecure_skip_verify", "list"),
    "inference-pool": ("inference_pool", "str"),
    "pool-group": ("pool_group", "str"),
    "max-idle-conns-per-host": ("max_idle_conns_per_host", "int"),
    "prefill-max-retries": ("prefill_max_retries", "int"),
    "prefill-retry-backoff": ("prefill_retry_backoff", "duration"),
    "decode-chunk-size": ("decode_chunk_size", "int"),
    "tracing": ("tracing", "bool"),
    "metrics-port": ("metrics_port", "int"),
}

# argparse dest → default, applied after the YAML (so a flag left out can come from the file).
_DEFAULTS: Mapping[str, Any] = {
    "port": 8000,
    "model_server_port": None,
    "vllm_port": 8200,
    "data_parallel_size": 1,
    "kv_connector": NIXLV2,
    "ec_connector": "",
    "mooncake_bootstrap_port": 8998,
    "p2p_connector_port": 7777,
    "enable_p2p_pull": False,
    "enable_ssrf_protection": False,
    "enable_prefiller_sampling": False,
    "secure_proxy": True,
    "cert_path": "",
    "enable_tls": (),
    "tls_insecure_skip_verify": (),
    "inference_pool": "",
    "pool_group": _V1_GROUP,
    "max_idle_conns_per_host": 1024,
    "prefill_max_retries": 0,
    "prefill_retry_backoff": 0.2,
    "decode_chunk_size": 0,
    "tracing": False,
    "metrics_port": 0,
}
_ENV: Mapping[str, tuple[str, str]] = {
    "inference_pool": ("INFERENCE_POOL", "str"),
    "enable_prefiller_sampling": ("ENABLE_PREFILLER_SAMPLING", "bool"),
    "mooncake_bootstrap_port": ("MOONCAKE_BOOTSTRAP_PORT", "int"),
    "p2p_connector_port": ("P2P_CONNECTOR_PORT", "int"),
}


class SidecarOptionsError(ValueError):
    """A flag, YAML key or environment value that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class SidecarOptions:
    """Everything ``epp sidecar`` runs with, validated."""

    port: int = 8000
    model_server_port: int = 8200
    model_server_host: str = "localhost"
    bind_address: str = "0.0.0.0"
    data_parallel_size: int = 1
    kv_connector: str = NIXLV2
    tls_stages: frozenset[str] = frozenset()
    insecure_stages: frozenset[str] = frozenset()
    secure_proxy: bool = True
    cert_path: str = ""
    ssrf_protection: bool = False
    pool_namespace: str = ""
    pool_name: str = ""
    pool_group: str = _V1_GROUP
    kubeconfig: str = ""
    prefiller_sampling: bool = False
    prefill_max_retries: int = 0
    prefill_retry_backoff: float = 0.2
    prefill_timeout: float = 60.0
    local_prefill_fallback: bool = True
    metrics_port: int = 0
    pod_ip: str = ""
    logging: LoggingOptions = field(default_factory=LoggingOptions)
    no_effect: tuple[str, ...] = ()
    """Flags set that change nothing here, for a note at start."""

    def __post_init__(self) -> None:
        if not 1 <= self.data_parallel_size <= _MAX_DATA_PARALLEL:
            raise SidecarOptionsError(
                f"--data-parallel-size must be 1..{_MAX_DATA_PARALLEL}, got {self.data_parallel_size}"
            )
        for flag, start in (("--port", self.port), ("--model-server-port", self.model_server_port)):
            end = start + self.data_parallel_size - 1
            if not 1 <= start <= 65535 or end > 65535:
                raise SidecarOptionsError(f"{flag}: port range [{start}, {end}] is outside 1..65535")
        if not 0 <= self.metrics_port <= 65535:
            raise SidecarOptionsError(f"--metrics-port must be 0..65535, got {self.metrics_port}")
        if self.prefill_max_retries < 0:
            raise SidecarOptionsError(f"--prefill-max-retries must be >= 0, got {self.prefill_max_retries}")
        if self.prefill_max_retries > 0 and self.prefill_retry_backoff <= 0:
            raise SidecarOptionsError(
                "--prefill-retry-backoff must be positive when --prefill-max-retries > 0, "
                f"got {self.prefill_retry_backoff}s"
            )
        if self.prefill_timeout < 0:
            raise SidecarOptionsError(f"--prefill-timeout must be >= 0 (0: none), got {self.prefill_timeout}s")
        if self.ssrf_protection and not (self.pool_namespace and self.pool_name):
            raise SidecarOptionsError(
                "--inference-pool flag or INFERENCE_POOL environment variable is required when "
                "--enable-ssrf-protection is true"
            )

    def scheme(self, stage: str) -> str:
        return "https" if stage in self.tls_stages else "http"

    @property
    def decoder_url(self) -> str:
        return f"{self.scheme('decoder')}://{_host(self.model_server_host)}:{self.model_server_port}"


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def add_sidecar_flags(p: argparse.ArgumentParser) -> None:
    """Register every flag; defaults are applied later (a flag given wins over ``--configuration``)."""

    def flag(name: str, **kw: Any) -> None:
        p.add_argument(name, default=None, **kw)

    def switch(name: str, help_text: str) -> None:
        p.add_argument(name, type=go_bool, nargs="?", const=True, default=None, help=help_text)

    def stages(name: str, help_text: str) -> None:
        p.add_argument(name, action="append", default=None, help=help_text)

    flag("--port", type=int, help="the port the sidecar listens on (rank r of --data-parallel-size: port+r) [8000]")
    flag("--model-server-port", type=int, help="the port the model server listens on (rank r: port+r) [8200]")
    flag("--vllm-port", type=int, help="deprecated: --model-server-port")
    flag("--data-parallel-size", type=int, help="the model server's data-parallel size (1-8) [1]")
    flag("--kv-connector", help="the KV protocol between prefiller and decoder: nixlv2 or shared-storage [nixlv2]")
    flag("--ec-connector", help="the EC protocol between encoder and prefiller (none is built here)")
    flag("--mooncake-bootstrap-port", type=int, help="with --kv-connector=mooncake (not built here) [8998]")
    flag("--p2p-connector-port", type=int, help="with the offloading connector (not built here) [7777]")
    switch("--enable-p2p-pull", help_text="cached-prefix pulls over P2P (not built here)")
    switch("--enable-ssrf-protection", help_text="only call prefill pods of --inference-pool (403 otherwise)")
    flag("--inference-pool", help="the InferencePool as namespace/name or name (default namespace); env INFERENCE_POOL")
    flag("--pool-group", help=f"the InferencePool's API group: {' or '.join(_POOL_GROUPS)}")
    switch("--enable-prefiller-sampling", help_text="pick the prefill host at random among those named")
    stages("--enable-tls", help_text=f"stages to call over TLS: {', '.join(STAGES)} (comma-separated or repeated)")
    stages("--tls-insecure-skip-verify", help_text="stages whose certificate is not verified")
    switch("--secure-proxy", help_text="serve TLS (a self-signed certificate without --cert-path) [true]")
    flag("--cert-path", help="directory with tls.crt and tls.key for --secure-proxy")
    flag("--max-idle-conns-per-host", type=int, help="Go transport tuning (no effect here)")
    flag("--prefill-max-retries", type=int, help="retries of a prefill that failed with 502/503/504 or no answer [0]")
    flag("--prefill-retry-backoff", help="delay between prefill retries [200ms]")
    flag("--decode-chunk-size", type=int, help="chunked decode token budget (0: off; chunked decode is not built here)")
    switch("--tracing", help_text="OpenTelemetry tracing (no effect here)")
    flag("--metrics-port", type=int, help="port of the sidecar's Prometheus /metrics (0: off) [0]")
    flag("--configuration", help="the configuration as inline YAML (keys as the flags)")
    flag("--configuration-file", help="a YAML file with the configuration")
    p.add_argument("--bind-address", default="0.0.0.0", help="address every listener binds (ours)")
    p.add_argument("--model-server-host", default="localhost", help="host of the local model server (ours)")
    p.add_argument(
        "--prefill-timeout", default="60s", help="give up on a prefill after this long (ours; 0: never) [60s]"
    )
    p.add_argument(
        "--local-prefill-fallback",
        type=go_bool,
        nargs="?",
        const=True,
        default=True,
        help="prefill on the decode engine when the prefiller still fails after the retries (ours) [true]",
    )
    p.add_argument(
        "--kubeconfig", default="", help="kubeconfig for the SSRF allowlist (default: $KUBECONFIG, in-cluster)"
    )
    for name in _MORIIO_FLAGS:  # upstream's MoRI-IO flags: known, so that giving one is refused by name
        p.add_argument(
            f"--moriio-{name}", dest=f"moriio_{name.replace('-', '_')}", nargs="?", const="", help=argparse.SUPPRESS
        )
    add_logging_flags(p)


def _yaml(args: argparse.Namespace) -> Mapping[str, Any]:
    inline, path = args.configuration, args.configuration_file
    if inline and path:
        raise SidecarOptionsError("flags --configuration and --configuration-file are mutually exclusive")
    if not (inline or path):
        return {}
    try:
        text = inline if inline else Path(path).read_text(encoding="utf-8")  # at start, before the loop runs
        data = yaml.safe_load(text) or {}
    except OSError as e:
        raise SidecarOptionsError(f"--configuration-file {path}: {e}") from e
    except yaml.YAMLError as e:
        raise SidecarOptionsError(f"failed to unmarshal sidecar configuration: {e}") from e
    if not isinstance(data, Mapping):
        raise SidecarOptionsError(f"sidecar configuration must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_YAML_KEYS))
    if unknown:
        raise SidecarOptionsError(f"sidecar configuration: unknown field(s) {unknown}")
    return data


def _typed(where: str, kind: str, value: Any) -> Any:
    try:
        if kind == "int" and not isinstance(value, bool):
            return int(value)
        if kind == "bool":
            return value if isinstance(value, bool) else go_bool(str(value))
        if kind == "str":
            return str(value)
        if kind == "list":
            return (value,) if isinstance(value, str) else tuple(str(v) for v in value)
        if kind == "duration":
            return parse_duration(str(value))
    except (TypeError, ValueError, argparse.ArgumentTypeError) as e:
        raise SidecarOptionsError(f"{where}: invalid {kind} {value!r}") from e
    raise SidecarOptionsError(f"{where}: invalid {kind} {value!r}")


def _resolved(args: argparse.Namespace) -> dict[str, Any]:
    """Each setting: the flag, else the YAML key, else the environment, else the default."""
    values = {dest: getattr(args, dest) for dest in _DEFAULTS}
    if values["prefill_retry_backoff"] is not None:
        values["prefill_retry_backoff"] = _typed("--prefill-retry-backoff", "duration", values["prefill_retry_backoff"])
    for key, value in _yaml(args).items():
        dest, kind = _YAML_KEYS[key]
        if values[dest] is None:
            values[dest] = _typed(f"configuration key {key}", kind, value)
    for dest, (env, kind) in _ENV.items():
        raw = os.environ.get(env)
        if values[dest] is None and raw:
            values[dest] = _typed(f"environment variable {env}", kind, raw)
    for dest, default in _DEFAULTS.items():
        if values[dest] is None:
            values[dest] = default
    return values


def _stage_list(flag: str, entries: Sequence[str]) -> frozenset[str]:
    chosen = frozenset(s.strip() for entry in entries for s in entry.split(",") if s.strip())
    unknown = sorted(chosen - set(STAGES))
    if unknown:
        raise SidecarOptionsError(f"{flag} stages must be one of: {', '.join(STAGES)}; got {unknown}")
    return chosen


def _refuse_unbuilt(v: Mapping[str, Any], args: argparse.Namespace) -> None:
    """What upstream's sidecar does and this one does not: a clear error at start, never a silent no-op."""
    connector = v["kv_connector"]
    if connector not in _UPSTREAM_KV_CONNECTORS:
        raise SidecarOptionsError(f"--kv-connector must be one of: {', '.join(_UPSTREAM_KV_CONNECTORS)}")
    if connector not in BUILT_KV_CONNECTORS:
        raise SidecarOptionsError(
            f"--kv-connector {connector}: not built in epp sidecar (built: {', '.join(BUILT_KV_CONNECTORS)}); "
            "use the llm-d routing sidecar for it"
        )
    if v["ec_connector"]:
        if v["ec_connector"] not in _UPSTREAM_EC_CONNECTORS:
            raise SidecarOptionsError(f"--ec-connector must be one of: {', '.join(_UPSTREAM_EC_CONNECTORS)}")
        raise SidecarOptionsError(
            f"--ec-connector {v['ec_connector']}: encoder disaggregation is not built in epp sidecar "
            "(requests with x-encoder-hosts-ports are served without the encode stage)"
        )
    if v["enable_p2p_pull"]:
        raise SidecarOptionsError("--enable-p2p-pull: P2P cached-prefix pulls are not built in epp sidecar")
    if v["decode_chunk_size"] < 0:
        raise SidecarOptionsError(f"--decode-chunk-size must be >= 0, got {v['decode_chunk_size']}")
    if v["decode_chunk_size"] > 0:
        raise SidecarOptionsError("--decode-chunk-size: chunked decode is not built in epp sidecar (use 0)")
    for name in ("mooncake_bootstrap_port", "p2p_connector_port"):
        if not 1 <= v[name] <= 65535:
            raise SidecarOptionsError(f"--{name.replace('_', '-')} must be between 1 and 65535, got {v[name]}")
    for name in _MORIIO_FLAGS:
        if getattr(args, f"moriio_{name.replace('-', '_')}") is not None:
            raise SidecarOptionsError(f"--moriio-{name}: MoRI-IO is not built in epp sidecar")


def _pool(value: str) -> tuple[str, str]:
    if not value:
        return "", ""
    if value.count("/") > 1:
        raise SidecarOptionsError("--inference-pool must be in format 'namespace/name' or 'name', not multiple slashes")
    namespace, _, name = value.rpartition("/")
    if "/" in value and not (namespace and name):
        raise SidecarOptionsError("--inference-pool cannot have empty namespace or name")
    return namespace or "default", name


def options_from_args(args: argparse.Namespace) -> SidecarOptions:
    """Validate and combine flags, YAML and environment; raises :class:`SidecarOptionsError`."""
    v = _resolved(args)
    _refuse_unbuilt(v, args)
    if v["pool_group"] not in _POOL_GROUPS:
        raise SidecarOptionsError(f"unsupported --pool-group {v['pool_group']!r}, must be one of {list(_POOL_GROUPS)}")
    namespace, name = _pool(v["inference_pool"])
    no_effect = []
    if args.max_idle_conns_per_host is not None:
        no_effect.append("--max-idle-conns-per-host: connections are pooled per host without an idle cap")
    if v["tracing"]:
        no_effect.append("--tracing: epp sidecar exports no spans (trace headers are forwarded unchanged)")
    if args.vllm_port is not None:
        no_effect.append("--vllm-port is deprecated: use --model-server-port")
    try:
        timeout = parse_duration(args.prefill_timeout)
    except ValueError as e:
        raise SidecarOptionsError(f"--prefill-timeout: {e}") from e
    # Upstream's precedence: --model-server-port, --vllm-port, then the file's model-server-port, vllm-port.
    if args.model_server_port is None and args.vllm_port is not None:
        v["model_server_port"] = args.vllm_port
    return SidecarOptions(
        port=v["port"],
        model_server_port=v["model_server_port"] if v["model_server_port"] is not None else v["vllm_port"],
        model_server_host=args.model_server_host,
        bind_address=args.bind_address,
        data_parallel_size=v["data_parallel_size"],
        kv_connector=v["kv_connector"],
        tls_stages=_stage_list("--enable-tls", v["enable_tls"]),
        insecure_stages=_stage_list("--tls-insecure-skip-verify", v["tls_insecure_skip_verify"]),
        secure_proxy=v["secure_proxy"],
        cert_path=v["cert_path"],
        ssrf_protection=v["enable_ssrf_protection"],
        pool_namespace=namespace,
        pool_name=name,
        pool_group=v["pool_group"],
        kubeconfig=args.kubeconfig,
        prefiller_sampling=v["enable_prefiller_sampling"],
        prefill_max_retries=v["prefill_max_retries"],
        prefill_retry_backoff=v["prefill_retry_backoff"],
        prefill_timeout=timeout,
        local_prefill_fallback=args.local_prefill_fallback,
        metrics_port=v["metrics_port"],
        pod_ip=os.environ.get("POD_IP", ""),
        logging=logging_options_from_args(args),
        no_effect=tuple(no_effect),
    )
