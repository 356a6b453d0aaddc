"""What the two KV connectors send: the prefill leg's body and the decode leg's, from the client's request.

``nixlv2`` (the default; upstream ``connector_nixlv2.go``, vLLM's NixlConnector in read mode):

- prefill: the client's body with ``kv_transfer_params`` asking for a remote decode
  (``do_remote_decode: true``, ``do_remote_prefill: false``, the remote fields null), ``stream``
  false without ``stream_options``, and every token limit of its API set to 1 (added when absent):
  ``max_tokens``, ``max_completion_tokens``, ``min_tokens`` for chat, completions and Anthropic
  messages; ``max_output_tokens`` for the Responses API; ``sampling_params.max_tokens`` and
  ``min_tokens`` for vLLM's generate;
- decode: the client's body unchanged, plus the ``kv_transfer_params`` the prefill answered with
  (``null`` when it sent none).

``shared-storage`` (upstream ``connector_shared_storage.go``, the prefill writes the KV to storage
both engines read): prefill with ``max_tokens`` and ``max_completion_tokens`` 1 and
``cache_hit_threshold`` 0, streaming untouched; decode with ``cache_hit_threshold`` 0. A request
that carries ``cache_hit_threshold`` is first tried on the decode engine alone; only an answer
finishing with ``cache_threshold`` (the engine holds too little of the prompt) leads to the prefill.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "Api",
    "CACHE_THRESHOLD",
    "api_of",
    "nixl_decode",
    "nixl_prefill",
    "shared_storage_decode",
    "shared_storage_prefill",
]

CACHE_THRESHOLD = "cache_threshold"
_THRESHOLD = "cache_hit_threshold"


class Api(enum.Enum):
    """Which token-limit fields a request of an API has."""

    CHAT = ("max_tokens", "max_completion_tokens", "min_tokens")
    RESPONSES = ("max_output_tokens",)
    GENERATE = ("max_tokens", "min_tokens")


_APIS = {
    "/v1/chat/completions": Api.CHAT,
    "/v1/completions": Api.CHAT,
    "/v1/messages": Api.CHAT,
    "/v1/responses": Api.RESPONSES,
    "/inference/v1/generate": Api.GENERATE,
}


def api_of(path: str) -> Api | None:
    """The API of an inference path the sidecar disaggregates (None: proxied as it is)."""
    return _APIS.get(path)


def nixl_prefill(request: dict[str, Any], api: Api) -> dict[str, Any]:
    body = dict(request)
    body["kv_transfer_params"] = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    body["stream"] = False
    body.pop("stream_options", None)
    limits = body
    if api is Api.GENERATE:
        params = body.get("sampling_params")
        limits = body["sampling_params"] = dict(params) if isinstance(params, dict) else {}
    for name in api.value:
        limits[name] = 1
    return body


def nixl_decode(request: dict[str, Any], kv_transfer_params: Any) -> dict[str, Any]:
    return {**request, "kv_transfer_params": kv_transfer_params}


def shared_storage_prefill(request: dict[str, Any]) -> dict[str, Any]:
    return {**request, "max_tokens": 1, "max_completion_tokens": 1, _THRESHOLD: 0}


def shared_storage_decode(request: dict[str, Any]) -> dict[str, Any]:
    return {**request, _THRESHOLD: 0}
