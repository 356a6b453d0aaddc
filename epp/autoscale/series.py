"""The engine series the autoscaler reads from a ``/metrics`` page, per engine and per data-parallel rank.

vLLM and SGLang name the same things differently (upstream #1351 maps them one to one):
KV-cache use (``vllm:kv_cache_usage_perc`` / ``sglang:token_usage``), waiting and running
requests, the KV capacity in tokens (``vllm:cache_config_info``'s ``num_gpu_blocks × block_size``
/ ``sglang:max_total_num_tokens``), and the counters the V2 and throughput analyzers turn into
rates: prompt and generation token histograms (``_sum`` / ``_count``), prefix-cache hits and
queries (SGLang: cached and prompt tokens), inter-token latency, completed requests.

A vLLM serving several data-parallel ranks behind one API server labels every series with
``engine`` (the rank): :func:`read_page` returns one :class:`RankReading` per rank, so each rank
counts as an instance with its own KV cache and queue (upstream #1469). A page without the label
is one instance. Counters keep Prometheus's ``_total`` suffix; both spellings are accepted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from epp.autoscale.engine_args import SGLANG
from epp.datalayer.promtext import Sample, parse

__all__ = ["COUNTERS", "RANK_LABEL", "RankReading", "read_page"]

RANK_LABEL = "engine"


@dataclass(frozen=True, slots=True)
class _Names:
    kv: str
    waiting: str
    running: str
    capacity: str  # cache_config_info (labels) or a token gauge
    counters: Mapping[str, tuple[str, ...]]


COUNTERS = ("prompt_sum", "prompt_count", "gen_sum", "gen_count", "hits", "queries", "itl_sum", "itl_count", "done")

_VLLM = _Names(
    kv="vllm:kv_cache_usage_perc",
    waiting="vllm:num_requests_waiting",
    running="vllm:num_requests_running",
    capacity="vllm:cache_config_info",
    counters={
        "prompt_sum": ("vllm:request_prompt_tokens_sum",),
        "prompt_count": ("vllm:request_prompt_tokens_count",),
        "gen_sum": ("vllm:request_generation_tokens_sum",),
        "gen_count": ("vllm:request_generation_tokens_count",),
        "hits": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"),
        "queries": ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"),
        "itl_sum": ("vllm:inter_token_latency_seconds_sum",),
        "itl_count": ("vllm:inter_token_latency_seconds_count",),
        "done": ("vllm:request_success_total", "vllm:request_success"),
    },
)
_SGLANG = _Names(
    kv="sglang:token_usage",
    waiting="sglang:num_queue_reqs",
    running="sglang:num_running_reqs",
    capacity="sglang:max_total_num_tokens",
    counters={
        "prompt_sum": ("sglang:prompt_tokens_histogram_sum",),
        "prompt_count": ("sglang:prompt_tokens_histogram_count",),
        "gen_sum": ("sglang:generation_tokens_histogram_sum",),
        "gen_count": ("sglang:generation_tokens_histogram_count",),
        "hits": ("sglang:cached_tokens_total",),
        "queries": ("sglang:prompt_tokens_total",),
        "itl_sum": ("sglang:inter_token_latency_seconds_sum",),
        "itl_count": ("sglang:inter_token_latency_seconds_count",),
        "done": ("sglang:num_requests_total",),
    },
)


@dataclass(frozen=True, slots=True)
class RankReading:
    """One instance's gauges (None: not on the page) and counter totals, as read."""

    rank: str
    kv: float | None
    waiting: float | None
    running: float | None
    capacity: int = 0
    counters: Mapping[str, float] = field(default_factory=dict)


def _names(engine: str) -> _Names:
    return _SGLANG if engine == SGLANG else _VLLM


def _of_rank(samples: Sequence[Sample] | None, rank: str) -> list[Sample]:
    return [s for s in samples or () if s.labels.get(RANK_LABEL, "") == rank and math.isfinite(s.value)]


def _gauge(samples: Sequence[Sample] | None, rank: str) -> float | None:
    chosen = _of_rank(samples, rank)
    return max(s.value for s in chosen) if chosen else None


def _capacity(names: _Names, samples: Sequence[Sample] | None, rank: str) -> int:
    for s in _of_rank(samples, rank):
        if names is _SGLANG:
            return max(0, int(s.value))
        try:
            return max(0, int(s.labels["num_gpu_blocks"]) * int(s.labels["block_size"]))
        except (KeyError, ValueError):
            continue
    return 0


def read_page(page: bytes, engine: str) -> list[RankReading]:
    """Every rank's reading on a page (one, unlabelled, for a single-engine server)."""
    names = _names(engine)
    wanted = [names.kv, names.waiting, names.running, names.capacity]
    wanted += [n for alts in names.counters.values() for n in alts]
    result = parse(page, wanted)
    ranks = sorted({s.labels.get(RANK_LABEL, "") for s in result.samples.get(names.waiting, ())}) or [""]
    out: list[RankReading] = []
    for rank in ranks:
        counters: dict[str, float] = {}
        for key, alternatives in names.counters.items():
            for name in alternatives:
                chosen = _of_rank(result.samples.get(name), rank)
                if chosen:
                    counters[key] = sum(s.value for s in chosen)
                    break
        out.append(
            RankReading(
                rank=rank if len(ranks) > 1 else "",
                kv=_gauge(result.samples.get(names.kv), rank),
                waiting=_gauge(result.samples.get(names.waiting), rank),
                running=_gauge(result.samples.get(names.running), rank),
                capacity=_capacity(names, result.samples.get(names.capacity), rank),
                counters=counters,
            )
        )
    return out
