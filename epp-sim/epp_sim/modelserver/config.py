"""The model-server simulator's settings: one frozen dataclass, validated when built.

Defaults follow vLLM's where vLLM has one (``max_num_seqs`` 256, ``block_size`` 16,
``max_num_batched_tokens`` 8192 for the V1 engine, ``max_loras`` 1); the timing constants
describe an 8B-class model on one data-centre GPU (see ``docs/simulator.md``). ``Pins`` are the
values a test forces into ``/metrics`` regardless of what the performance model says.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from .kv_events import KvEventsConfig

__all__ = ["Pins", "PinsError", "SimConfig"]


class PinsError(ValueError):
    """A pin document that cannot be applied; the message names the field and the value."""


@dataclass(frozen=True, slots=True)
class Pins:
    """Values reported in ``/metrics`` instead of the model's own; ``None`` means not pinned."""

    waiting: int | None = None
    running: int | None = None
    kv_cache_usage: float | None = None
    running_loras: tuple[str, ...] | None = None
    waiting_loras: tuple[str, ...] | None = None
    max_lora: int | None = None
    gauges: Mapping[str, float] | None = None
    """Gauges vLLM does not have, added to ``/metrics`` unlabelled (name → value): the custom metrics a
    plugin reads (``core-metrics-extractor``'s ``customMetrics``)."""

    def __post_init__(self) -> None:
        for name in ("waiting", "running", "max_lora"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise PinsError(f"pin {name} must be a non-negative integer, got {value!r}")
        kv = self.kv_cache_usage
        if kv is not None and (
            isinstance(kv, bool) or not isinstance(kv, int | float) or not math.isfinite(kv) or not 0.0 <= kv <= 1.0
        ):
            raise PinsError(f"pin kv_cache_usage must be a number in [0, 1], got {kv!r}")
        for name in ("running_loras", "waiting_loras"):
            value = getattr(self, name)
            if value is not None and not all(isinstance(v, str) and v and "," not in v for v in value):
                raise PinsError(f"pin {name} must be adapter names without commas, got {value!r}")
        if self.gauges is not None:
            _check_gauges(self.gauges)

    def updated(self, doc: object) -> Pins:
        """These pins with the fields of a ``POST /_sim/pin`` body applied (``null`` unpins a field).

        Adapter lists may be given as a list or a comma-separated string.
        """
        if not isinstance(doc, Mapping):
            raise PinsError(f"pin body must be a JSON object, got {type(doc).__name__}")
        known = {f.name for f in fields(self)}
        unknown = sorted(str(k) for k in set(doc) - known)
        if unknown:
            raise PinsError(f"unknown pin fields {unknown}; known: {sorted(known)}")
        values: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in doc.items():
            if name in ("running_loras", "waiting_loras") and value is not None:
                value = _adapter_list(name, value)
            if name == "gauges" and value is not None:
                _check_gauges(value)
                value = MappingProxyType(dict(value))
            values[name] = value
        return Pins(**values)

    def to_json(self) -> dict[str, Any]:
        """The pinned fields only, adapter lists as lists."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else dict(value) if f.name == "gauges" else value
        return out


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _check_gauges(gauges: object) -> None:
    if not isinstance(gauges, Mapping):
        raise PinsError(f"pin gauges must be an object of metric name to number, got {gauges!r}")
    for name, value in gauges.items():
        if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
            raise PinsError(f"pin gauges: {name!r} is not a Prometheus metric name")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise PinsError(f"pin gauges.{name} must be a finite number, got {value!r}")


def _adapter_list(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v for v in (part.strip() for part in value.split(",")) if v)
    if isinstance(value, list | tuple):
        return tuple(value)
    raise PinsError(f"pin {name} must be a list of adapter names or a comma-separated string, got {value!r}")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything that shapes one simulated vLLM server (timings are simulated seconds)."""

    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    #: adapter name → path, as ``--lora-modules name=path``; requests may name any of them
    lora_modules: Mapping[str, str] = field(default_factory=dict)
    enable_lora: bool = True
    max_loras: int = 1
    lora_load_time: float = 0.2
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    num_gpu_blocks: int = 8192
    block_size: int = 16
    max_model_len: int = 8192
    enable_prefix_caching: bool = True
    #: seconds per uncached prompt token computed in a step (chunked prefill)
    prefill_time_per_token: float = 0.00005
    #: fixed cost of one engine step
    decode_time_base: float = 0.010
    #: extra cost per sequence in the step's batch
    decode_time_per_seq: float = 0.0001
    #: disaggregated serving, decode role: fixed cost of pulling a prompt's KV from the prefill pod (RDMA set-up)
    kv_transfer_latency: float = 0.002
    #: ... plus this per prompt token not already cached here (8B-class model over 400G InfiniBand: ~3 µs)
    kv_transfer_time_per_token: float = 0.000003
    #: output length when a request gives no max_tokens: seeded in [default_max_tokens // 4, default_max_tokens]
    default_max_tokens: int = 128
    seed: int = 0
    #: wall seconds = simulated seconds / time_scale
    time_scale: float = 1.0
    pins: Pins = field(default_factory=Pins)
    #: vLLM's ``--kv-events-config``: publish KV events over ZMQ (off by default, as in vLLM)
    kv_events: KvEventsConfig = field(default_factory=KvEventsConfig)
    #: ``--tokenizer``: a tokenizer.json (or its directory); None → the default tokenization, 4 characters a token
    tokenizer: str | None = None
    #: vLLM's ``--enable-prompt-tokens-details``: usage carries ``prompt_tokens_details.cached_tokens``
    enable_prompt_tokens_details: bool = False

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("model must be a non-empty name")
        positive_ints = ("max_loras", "max_num_seqs", "max_num_batched_tokens", "num_gpu_blocks", "block_size")
        for name in (*positive_ints, "max_model_len", "default_max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        timings = ("lora_load_time", "prefill_time_per_token", "decode_time_base", "decode_time_per_seq")
        for name in (*timings, "kv_transfer_latency", "kv_transfer_time_per_token"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
        if self.decode_time_base <= 0 and self.decode_time_per_seq <= 0:
            raise ValueError("decode_time_base and decode_time_per_seq cannot both be 0: steps would take no time")
        if not math.isfinite(self.time_scale) or self.time_scale <= 0:
            raise ValueError(f"time_scale must be a positive number, got {self.time_scale!r}")
        if self.num_gpu_blocks * self.block_size < self.max_model_len:
            raise ValueError(
                f"num_gpu_blocks × block_size ({self.num_gpu_blocks} × {self.block_size}) must hold one sequence "
                f"of max_model_len ({self.max_model_len}) tokens, as vLLM requires"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least max_num_seqs "
                f"({self.max_num_seqs}), as vLLM requires"
            )
        for name, path in self.lora_modules.items():
            if not name or "," in name or name == self.model:
                raise ValueError(f"lora module name {name!r} must be non-empty, comma-free and differ from the model")
            if not isinstance(path, str):
                raise ValueError(f"lora module {name!r} path must be a string, got {path!r}")
        if self.lora_modules and not self.enable_lora:
            raise ValueError("lora_modules given but enable_lora is false")
