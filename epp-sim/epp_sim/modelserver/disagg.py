"""Disaggregated serving on the simulated vLLM: the ``kv_transfer_params`` a request carries, and the answer's.

vLLM's NixlConnector protocol, as the llm-d inference simulator plays it (``pkg/api/request.go``,
``response.go``):

- ``do_remote_decode: true`` — the prefill pod's leg: streaming is refused (400 "Prefill does not
  support streaming"); the prompt is prefilled as usual and the answer, finishing with
  ``remote_decode``, carries ``kv_transfer_params`` telling the decode pod where the KV is:
  ``do_remote_decode: false``, ``do_remote_prefill: true``, ``remote_engine_id`` (this server's
  ``sim-<host:port>``; upstream's simulator sends placeholders), ``remote_block_ids`` (the prompt's
  block hashes), ``remote_host``, ``remote_port``, ``tp_size`` 1;
- ``do_remote_prefill: true`` — the decode pod's leg: no local prefill; the engine pulls the KV
  instead (its transfer time, ``engine.py``). Like upstream's simulator, the remote fields are not
  checked against a live prefill; the server keeps the last ones it received (``/_sim/stats``).

``cache_hit_threshold`` (0..1, the shared-storage connector's): a request whose prompt is cached
here less than that fraction finishes at once with ``cache_threshold`` and no tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KvTransfer", "cache_hit_threshold", "kv_transfer", "prefill_answer_params"]

_BLOCK_ID_BITS = 31  # block ids as vLLM's are: small non-negative ints


@dataclass(frozen=True, slots=True)
class KvTransfer:
    """A request's ``kv_transfer_params``: which leg it is, and the fields as sent."""

    remote_decode: bool
    remote_prefill: bool
    params: Mapping[str, Any] = field(default_factory=dict)


def kv_transfer(body: Mapping[str, Any]) -> KvTransfer | None:
    """The request's ``kv_transfer_params`` (None when absent or null); ValueError names a bad one."""
    params = body.get("kv_transfer_params")
    if params is None:
        return None
    if not isinstance(params, dict):
        raise ValueError(f"kv_transfer_params must be an object, got {params!r}")
    flags = {}
    for name in ("do_remote_decode", "do_remote_prefill"):
        value = params.get(name, False)
        if not isinstance(value, bool):
            raise ValueError(f"kv_transfer_params.{name} must be a boolean, got {value!r}")
        flags[name] = value
    if flags["do_remote_decode"] and flags["do_remote_prefill"]:
        raise ValueError("kv_transfer_params: do_remote_decode and do_remote_prefill cannot both be true")
    return KvTransfer(flags["do_remote_decode"], flags["do_remote_prefill"], dict(params))


def cache_hit_threshold(body: Mapping[str, Any]) -> float | None:
    """``cache_hit_threshold`` as a fraction in [0, 1]; None when absent."""
    value = body.get("cache_hit_threshold")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"cache_hit_threshold must be a number in [0, 1], got {value!r}")
    return float(value)


def prefill_answer_params(address: str, hashes: Sequence[int]) -> dict[str, Any]:
    """What a prefill answer tells the decode pod: where to pull the prompt's KV from."""
    host, _, port = address.rpartition(":")
    return {
        "do_remote_decode": False,
        "do_remote_prefill": True,
        "remote_block_ids": [h & ((1 << _BLOCK_ID_BITS) - 1) for h in hashes],
        "remote_engine_id": f"sim-{address}",
        "remote_host": host.strip("[]"),
        "remote_port": int(port) if port.isdigit() else 0,
        "tp_size": 1,
    }
