"""``ServeOptions``: the flags of ``epp serve``, validated once when built.

Flag names and defaults are upstream's (GIE ``pkg/epp/server/options.go``); durations accept Go
syntax (``50ms``, ``2s``, ``1m30s``) or plain seconds. Errors name the flag and the bad value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from epp.durations import parse_duration
from epp.labels import Selector, SelectorError, parse_selector

__all__ = ["OptionsError", "ServeOptions", "parse_duration_flag", "parse_ports"]

V1_GROUP = "inference.networking.k8s.io"
V1ALPHA2_GROUP = "inference.networking.x-k8s.io"


class OptionsError(ValueError):
    """A flag value that cannot be used; the message names the flag."""


def parse_duration_flag(text: str, *, flag: str) -> float:
    """A Go-style duration flag value in seconds; the error names the flag."""
    try:
        return parse_duration(text)
    except ValueError:
        raise OptionsError(f"--{flag}: invalid duration {text!r} (use e.g. 50ms, 2s, 1m)") from None


def parse_ports(text: str, *, flag: str = "endpoint-target-ports") -> tuple[int, ...]:
    """Comma-separated list of 1..8 unique TCP ports."""
    ports: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.isdigit() or not 0 < int(part) < 65536:
            raise OptionsError(f"--{flag}: invalid port {part!r}")
        ports.append(int(part))
    if not 1 <= len(ports) <= 8:
        raise OptionsError(f"--{flag}: need 1 to 8 ports, got {len(ports)}")
    if len(set(ports)) != len(ports):
        raise OptionsError(f"--{flag}: duplicate ports in {text!r}")
    return tuple(ports)


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
    metrics_port: int = 9090
    secure_serving: bool = True
    cert_path: str = ""
    config_file: str = ""
    config_text: str = ""
    refresh_metrics_interval: float = 0.05
    refresh_prometheus_metrics_interval: float = 5.0
    metrics_staleness_threshold: float = 2.0
    kubeconfig: str = ""
    verbosity: int = 2
    max_request_body_bytes: int = 16 * 1024 * 1024
    disable_endpoint_subset_filter: bool = False
    leader_election: bool = False
    selector: Selector = field(init=False, default_factory=Selector)

    def __post_init__(self) -> None:
        if bool(self.pool_names) == bool(self.endpoint_selector):
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
        for name in ("grpc_port", "grpc_health_port", "metrics_port"):
            port = getattr(self, name)
            if not 0 <= port < 65536:
                raise OptionsError(f"--{name.replace('_', '-')}: invalid port {port}")
        if self.config_file and self.config_text:
            raise OptionsError("--config-file and --config-text are mutually exclusive")
        if self.cert_path and not self.secure_serving:
            raise OptionsError("--cert-path needs --secure-serving=true")
        if self.refresh_metrics_interval <= 0:
            raise OptionsError(f"--refresh-metrics-interval must be > 0, got {self.refresh_metrics_interval}")
        if self.metrics_staleness_threshold <= 0:
            raise OptionsError(f"--metrics-staleness-threshold must be > 0, got {self.metrics_staleness_threshold}")
        if self.max_request_body_bytes <= 0:
            raise OptionsError(f"--max-request-body-bytes must be > 0, got {self.max_request_body_bytes}")
        if not self.pool_namespace:
            object.__setattr__(self, "pool_namespace", os.environ.get("NAMESPACE") or "default")

    @property
    def standalone(self) -> bool:
        return bool(self.endpoint_selector)
