"""Builders for scheduling, plugin, config and request-control tests: endpoint states and requests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.framework.parsing import ParserTable
from epp.framework.request import InferenceRequest
from epp.plugins.parsers import DEFAULT_PARSER_TYPES, parser_of_type

NOW = 1000.0
"""ManualClock's default start; snapshots built here are fresh at this time."""


def state(
    index: int,
    *,
    queue: int = 0,
    kv: float = 0.0,
    active: Iterable[str] = (),
    waiting: Iterable[str] = (),
    max_adapters: int = 0,
    updated_at: float = NOW,
    port: int = 8000,
    namespace: str = "default",
) -> EndpointState:
    """Endpoint ``pod-<index>`` at 10.0.0.<index>:<port> with the given metrics."""
    endpoint = Endpoint(
        namespace=namespace,
        name=f"pod-{index}-rank-0",
        pod_name=f"pod-{index}",
        address=f"10.0.0.{index}",
        port=port,
    )
    metrics = MetricsSnapshot(
        waiting_queue=queue,
        kv_cache_usage=kv,
        active_adapters=frozenset(active),
        waiting_adapters=frozenset(waiting),
        max_adapters=max_adapters,
        updated_at=updated_at,
    )
    return EndpointState(endpoint, metrics)


def request(
    model: str = "m", *, target: str = "", priority: int = 0, headers: dict[str, str] | None = None
) -> InferenceRequest:
    return InferenceRequest(
        request_id="req-1", model=model, target_model=target or model, priority=priority, headers=headers or {}
    )


def names(states: Iterable[EndpointState]) -> list[str]:
    return [s.endpoint.pod_name for s in states]


_PARSERS = ParserTable(parser_of_type(t) for t in DEFAULT_PARSER_TYPES)  # type: ignore[misc]


def parsed(path: str, body: Mapping[str, Any], *, request_id: str = "r") -> InferenceRequest:
    """A request whose ``body`` was sent to ``path`` and read by the default parsers, as a served one is."""
    request = InferenceRequest(request_id=request_id, headers={":path": path})
    raw = orjson.dumps(body)
    parser, api = _PARSERS.resolve(path)
    parser.parse(raw, api).apply_to(request, len(raw))
    request.target_model = request.model
    return request
