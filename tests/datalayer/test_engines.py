"""Engine metric maps and samples → MetricsSnapshot, per engine, with partial results and LoRA rules."""

from __future__ import annotations

import pytest
from vllm_metrics_fixture import LoraSeries, VllmPage, render_vllm_metrics

from epp.datalayer.engines import ENGINES, engine_spec, extract, read
from epp.datalayer.promtext import parse
from epp.framework.endpoint import MetricsSnapshot


def test_vllm_page() -> None:
    page = VllmPage(waiting=4, running=11, kv_usage=0.625, num_gpu_blocks="31250", block_size=32)
    got = read(render_vllm_metrics(page).encode(), ENGINES["vllm"], updated_at=42.0)
    assert got.errors == () and got.updated
    assert got.snapshot == MetricsSnapshot(
        waiting_queue=4,
        running=11,
        kv_cache_usage=0.625,
        active_adapters=frozenset({"sql-lora", "tweet-summary-lora"}),
        waiting_adapters=frozenset({"tweet-summary-lora"}),
        max_adapters=4,
        cache_block_size=32,
        cache_num_blocks=31250,
        updated_at=42.0,
    )


def test_vllm_falls_back_to_gpu_cache_usage_perc_only_when_kv_cache_usage_perc_is_absent() -> None:
    legacy = render_vllm_metrics(VllmPage(kv_usage=0.3, legacy_kv=True))
    assert read(legacy.encode(), ENGINES["vllm"]).snapshot.kv_cache_usage == 0.3
    both = legacy + 'vllm:kv_cache_usage_perc{engine="0"} 0.9\n'
    assert read(both.encode(), ENGINES["vllm"]).snapshot.kv_cache_usage == 0.9
    assert "vllm:gpu_cache_usage_perc" not in ENGINES["vllm"].names  # no scan unless needed


def test_vllm_without_lora_and_before_blocks_are_known() -> None:
    page = VllmPage(lora=(), num_gpu_blocks="None")
    got = read(render_vllm_metrics(page).encode(), ENGINES["vllm"], updated_at=1.0)
    assert got.errors == ()
    assert got.snapshot.active_adapters == frozenset() and got.snapshot.max_adapters == 0
    assert got.snapshot.cache_block_size == 16 and got.snapshot.cache_num_blocks == 0


@pytest.mark.parametrize(
    ("series", "active", "waiting"),
    [
        # Largest value (most recent) among the series that name adapters.
        ([LoraSeries("a", "", 10), LoraSeries("b,c", "d", 30), LoraSeries("e", "", 20)], {"b", "c"}, {"d"}),
        # The newest series is empty (server idle): keep the last adapters seen, as upstream.
        ([LoraSeries("a", "b", 10), LoraSeries("", "", 99)], {"a"}, {"b"}),
        # Only empty series: nothing active.
        ([LoraSeries("", "", 5)], set(), set()),
        # Names are comma-split and trimmed.
        ([LoraSeries(" x , y ,", "", 1)], {"x", "y"}, set()),
    ],
)
def test_vllm_lora(series: list[LoraSeries], active: set[str], waiting: set[str]) -> None:
    snap = read(render_vllm_metrics(VllmPage(lora=series, max_lora=3)).encode(), ENGINES["vllm"]).snapshot
    assert (set(snap.active_adapters), set(snap.waiting_adapters), snap.max_adapters) == (active, waiting, 3)


def test_sglang() -> None:
    text = """# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen"} 6.0
sglang:num_running_reqs{model_name="qwen"} 2.0
sglang:token_usage{model_name="qwen"} 0.25
sglang:cache_config_info{page_size="64",num_pages="1000",model_name="qwen"} 1.0
"""
    got = read(text.encode(), engine_spec("sglang"), updated_at=3.0)
    assert got.errors == ()
    assert got.snapshot == MetricsSnapshot(
        waiting_queue=6, running=2, kv_cache_usage=0.25, cache_block_size=64, cache_num_blocks=1000, updated_at=3.0
    )


def test_trtllm_serve() -> None:
    text = """trtllm_num_requests_waiting 3
trtllm_num_requests_running 8
trtllm_kv_cache_utilization 0.5
trtllm_kv_cache_tokens_per_block 32
trtllm_kv_cache_max_blocks 4096
"""
    snap = read(text.encode(), engine_spec("trtllm-serve"), updated_at=1.0).snapshot
    assert (snap.waiting_queue, snap.running, snap.kv_cache_usage) == (3, 8, 0.5)
    assert (snap.cache_block_size, snap.cache_num_blocks) == (32, 4096)


def test_triton_tensorrt_llm_uses_label_selectors() -> None:
    text = """nv_trt_llm_request_metrics{model="ensemble",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="ensemble",request_type="scheduled",version="1"} 7
nv_trt_llm_request_metrics{model="ensemble",request_type="waiting",version="1"} 2
nv_trt_llm_request_metrics{model="ensemble",request_type="active",version="1"} 9
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="ensemble",version="1"} 0.125
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="ensemble",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="ensemble",version="1"} 2048
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="ensemble",version="1"} 256
"""
    snap = read(text.encode(), engine_spec("triton-tensorrt-llm"), updated_at=1.0).snapshot
    assert (snap.waiting_queue, snap.running, snap.kv_cache_usage) == (2, 7, 0.125)
    assert (snap.cache_block_size, snap.cache_num_blocks) == (64, 2048)


@pytest.mark.parametrize("label", ["", "vllm", "unknown-engine"])
def test_unknown_or_missing_engine_is_vllm(label: str) -> None:
    assert engine_spec(label) is ENGINES["vllm"]


def test_partial_results_keep_previous_values_for_what_did_not_parse() -> None:
    previous = MetricsSnapshot(waiting_queue=1, running=2, kv_cache_usage=0.9, max_adapters=4, updated_at=5.0)
    text = 'vllm:num_requests_waiting{m="x"} 7\nvllm:num_requests_running{m="x"} oops\n'
    got = extract(parse(text, ENGINES["vllm"].names), ENGINES["vllm"], previous=previous, updated_at=9.0)
    assert got.updated
    assert got.snapshot == MetricsSnapshot(
        waiting_queue=7, running=2, kv_cache_usage=0.9, max_adapters=4, updated_at=9.0, scrape_interval=4.0
    )
    joined = " | ".join(got.errors)
    assert "vllm:num_requests_running" in joined and "kv_cache_usage" in joined


def test_nothing_usable_leaves_previous_untouched() -> None:
    previous = MetricsSnapshot(waiting_queue=1, updated_at=5.0)
    got = read(b"<html>502 Bad Gateway</html>", ENGINES["vllm"], previous=previous, updated_at=9.0)
    assert not got.updated
    assert got.snapshot is previous
    assert len(got.errors) == 3  # queue, running, KV usage each missing


def test_non_finite_values_are_errors_not_values() -> None:
    text = "trtllm_num_requests_waiting NaN\ntrtllm_num_requests_running 1\ntrtllm_kv_cache_utilization +Inf\n"
    got = read(
        text.encode(), engine_spec("trtllm-serve"), previous=MetricsSnapshot(waiting_queue=3, kv_cache_usage=0.2)
    )
    assert (got.snapshot.waiting_queue, got.snapshot.running, got.snapshot.kv_cache_usage) == (3, 1, 0.2)
    assert sum("not a finite number" in e for e in got.errors) == 2
