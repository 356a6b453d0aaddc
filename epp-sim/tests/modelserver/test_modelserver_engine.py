"""The performance model, driven by a ManualClock: queueing, KV growth, prefix hits, LoRA, time scale."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from epp.clock import ManualClock
from epp_sim.modelserver import Engine, GenerationRequest, InvalidRequestError, Pins, RequestHandle

TICK = 0.002  # wall seconds per ManualClock advance


async def _settle() -> None:
    for _ in range(6):
        await asyncio.sleep(0)


async def advance(clock: ManualClock, seconds: float) -> None:
    """Move the clock forward in small ticks, letting the engine step between them."""
    for _ in range(round(seconds / TICK)):
        clock.advance(TICK)
        await _settle()


async def advance_until(
    clock: ManualClock, predicate: Callable[[], bool], *, limit: float = 30.0, tick: float = TICK
) -> float:
    """Advance until ``predicate`` holds; return the clock time it took. Fails past ``limit``."""
    start = clock.now()
    while not predicate():
        if clock.now() - start > limit:
            raise AssertionError(f"condition not reached within {limit} clock seconds")
        clock.advance(tick)
        await _settle()
    return clock.now() - start


async def started(engine: Engine) -> Engine:
    await engine.start()
    await _settle()
    return engine


async def test_single_request_timing_follows_the_model(clock: ManualClock, make_engine: Callable[..., Engine]) -> None:
    engine = await started(make_engine(prefill_time_per_token=0.001, decode_time_base=0.01, decode_time_per_seq=0.0))
    h = engine.submit(GenerationRequest(prompt="x" * 400, max_tokens=5))  # 100 prompt tokens
    await advance_until(clock, lambda: h.done)
    assert h.prompt_tokens == 100 and h.completion_tokens == 5 and h.finish_reason == "length"
    # prefill step = 0.01 + 100 × 0.001; then 4 decode steps of 0.01
    assert h.ttft == pytest.approx(0.11, abs=2 * TICK)
    assert engine.now() == pytest.approx(0.15, abs=3 * TICK)


async def test_burst_beyond_max_num_seqs_queues_then_drains(
    clock: ManualClock, make_engine: Callable[..., Engine]
) -> None:
    engine = await started(make_engine(max_num_seqs=8, max_num_batched_tokens=512))
    handles = [engine.submit(GenerationRequest(prompt=f"req {i} " * 10, max_tokens=10)) for i in range(30)]
    await advance(clock, 0.02)
    assert engine.running == 8
    assert engine.waiting == 22
    text = engine.render_metrics().decode()
    assert 'vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 22.0' in text
    await advance_until(clock, lambda: all(h.done for h in handles))
    assert engine.running == 0 and engine.waiting == 0
    # Later requests queued: their TTFT includes whole batches ahead of them.
    ttfts = [h.ttft for h in handles]
    assert all(t is not None for t in ttfts)
    assert ttfts[-1] > 3 * ttfts[0]  # type: ignore[operator]


async def test_kv_usage_rises_with_load_and_returns_to_zero(
    clock: ManualClock, make_engine: Callable[..., Engine]
) -> None:
    engine = await started(make_engine(num_gpu_blocks=512, max_model_len=4096))
    assert engine.kv_cache_usage == 0.0
    one = engine.submit(GenerationRequest(prompt="a" * 4096, max_tokens=20))  # 1024 tokens = 64 blocks
    await advance_until(clock, lambda: one.completion_tokens >= 1)
    single = engine.kv_cache_usage
    assert single == pytest.approx(65 / 512, abs=1 / 512)
    more = [engine.submit(GenerationRequest(prompt=f"{i}" * 4096, max_tokens=20)) for i in range(1, 4)]
    await advance_until(clock, lambda: all(h.completion_tokens >= 1 for h in more))
    assert engine.kv_cache_usage > 3 * single
    await advance_until(clock, lambda: all(h.done for h in [one, *more]))
    assert engine.kv_cache_usage == 0.0


async def test_full_kv_cache_queues_requests_and_preempts(
    clock: ManualClock, make_engine: Callable[..., Engine]
) -> None:
    # 40 blocks × 16 = 640 tokens; each request needs 256 prompt + 100 output tokens.
    engine = await started(make_engine(num_gpu_blocks=40, max_model_len=512, max_num_batched_tokens=1024))
    handles = [engine.submit(GenerationRequest(prompt=f"{i}" * 1024, max_tokens=100)) for i in range(4)]
    await advance(clock, 0.05)
    assert engine.running == 2 and engine.waiting == 2  # the third does not fit
    await advance_until(clock, lambda: all(h.done for h in handles))
    assert all(h.completion_tokens == 100 for h in handles)
    assert engine.stats()["preemptions"] >= 1  # the two running ones outgrew the cache
    assert engine.kv_cache_usage == 0.0


async def test_repeated_long_prefix_has_shorter_ttft_and_counts_hits(
    clock: ManualClock, make_engine: Callable[..., Engine]
) -> None:
    engine = await started(make_engine(prefill_time_per_token=0.001))
    system = "You are a helpful assistant. " * 140  # ~1000 tokens
    cold = engine.submit(GenerationRequest(prompt=system + "first question", max_tokens=2))
    await advance_until(clock, lambda: cold.done)
    assert engine.stats()["prefix_cache_hits"] == 0
    warm = engine.submit(GenerationRequest(prompt=system + "second question", max_tokens=2))
    await advance_until(clock, lambda: warm.done)
    assert cold.ttft is not None and warm.ttft is not None
    assert warm.ttft < cold.ttft / 5
    assert warm.cached_tokens >= 1000 - 16
    stats = engine.stats()
    assert stats["prefix_cache_hits"] == warm.cached_tokens
    assert stats["prefix_cache_queries"] == cold.prompt_tokens + warm.prompt_tokens
    text = engine.render_metrics().decode()
    assert f'vllm:prefix_cache_hits_total{{engine="0",model_name="{engine.config.model}"}} {warm.cached_tokens}.0' in (
        text
    )


async def test_lora_load_delay_and_slot_limit(clock: ManualClock, make_engine: Callable[..., Engine]) -> None:
    engine = await started(make_engine(lora_modules={"a": "/a", "b": "/b", "c": "/c"}, max_loras=2, lora_load_time=0.5))
    ha = engine.submit(GenerationRequest(prompt="for a", adapter="a", max_tokens=30))
    hb = engine.submit(GenerationRequest(prompt="for b", adapter="b", max_tokens=30))
    hc = engine.submit(GenerationRequest(prompt="for c", adapter="c", max_tokens=5))
    await advance(clock, 0.1)
    assert engine.waiting == 3 and engine.running == 0  # a and b loading, c has no slot
    assert _lora_info(engine) == ("2", "", "a,b,c")
    await advance_until(clock, lambda: ha.completion_tokens > 0 and hb.completion_tokens > 0)
    assert ha.ttft is not None and ha.ttft >= 0.5
    assert engine.running == 2 and engine.waiting == 1
    assert _lora_info(engine) == ("2", "a,b", "c")
    await advance_until(clock, lambda: ha.done and hb.done)
    b_done = engine.now()
    await advance_until(clock, lambda: hc.done)
    assert hc.ttft is not None
    # c starts loading only once a slot is idle, and loading takes 0.5 s
    assert engine.now() - b_done >= 0.5
    assert engine.stats()["loaded_adapters"] == ["a", "c"] or engine.stats()["loaded_adapters"] == ["b", "c"]
    assert _lora_info(engine) == ("2", "", "")


async def test_base_model_requests_pass_a_queued_adapter(
    clock: ManualClock, make_engine: Callable[..., Engine]
) -> None:
    engine = await started(make_engine(lora_modules={"a": "/a"}, lora_load_time=1.0))
    ha = engine.submit(GenerationRequest(prompt="adapter", adapter="a", max_tokens=2))
    base = engine.submit(GenerationRequest(prompt="base", max_tokens=2))
    await advance_until(clock, lambda: base.done)
    assert not ha.done and engine.now() < 1.0
    await advance_until(clock, lambda: ha.done)


async def test_time_scale_speeds_up_wall_time(clock: ManualClock, make_engine: Callable[..., Engine]) -> None:
    req = GenerationRequest(prompt="y" * 2000, max_tokens=50)
    slow = await started(make_engine(time_scale=1.0))
    h1 = slow.submit(req)
    wall_slow = await advance_until(clock, lambda: h1.done, tick=0.0002)
    fast = await started(make_engine(time_scale=10.0))
    h2 = fast.submit(req)
    wall_fast = await advance_until(clock, lambda: h2.done, tick=0.0002)
    assert wall_fast < wall_slow / 5
    # Reported latencies stay in simulated seconds.
    assert h2.ttft == pytest.approx(h1.ttft, rel=0.1)


async def test_output_length_without_max_tokens_is_seeded(
    clock: ManualClock, make_engine: Callable[..., Engine]
) -> None:
    engine = await started(make_engine(default_max_tokens=64))
    hs = [engine.submit(GenerationRequest(prompt="same prompt")) for _ in range(2)]
    other = engine.submit(GenerationRequest(prompt="same prompt", seed=12345))
    await advance_until(clock, lambda: all(h.done for h in [*hs, other]))
    assert hs[0].completion_tokens == hs[1].completion_tokens
    assert 16 <= hs[0].completion_tokens <= 64 and hs[0].finish_reason == "stop"
    assert 16 <= other.completion_tokens <= 64


async def test_abort_frees_kv_and_counts(clock: ManualClock, make_engine: Callable[..., Engine]) -> None:
    engine = await started(make_engine())
    h = engine.submit(GenerationRequest(prompt="q" * 4000, max_tokens=500))
    await advance_until(clock, lambda: h.completion_tokens > 3)
    assert engine.kv_cache_usage > 0
    h.abort()
    assert h.done and h.finish_reason == "abort"
    assert engine.kv_cache_usage == 0.0 and engine.running == 0
    assert 'finished_reason="abort",model_name=' in engine.render_metrics().decode()


async def test_streaming_consumer_sees_tokens_as_they_are_decoded(
    clock: ManualClock, make_engine: Callable[..., Engine]
) -> None:
    engine = await started(make_engine())
    h = engine.submit(GenerationRequest(prompt="stream me", max_tokens=4, stream=True))
    seen: list[tuple[int, float]] = []

    async def consume(handle: RequestHandle) -> None:
        async for n in handle.tokens():
            seen.append((n, engine.now()))

    task = asyncio.create_task(consume(h), name="consume")
    await advance_until(clock, lambda: task.done())
    await task
    assert sum(n for n, _ in seen) == 4
    assert len(seen) == 4  # one wake per decoded token
    assert seen[-1][1] > seen[0][1]


async def test_invalid_requests_are_refused(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(max_model_len=100, num_gpu_blocks=10)
    with pytest.raises(InvalidRequestError, match="maximum context length is 100"):
        engine.submit(GenerationRequest(prompt="x" * 400, max_tokens=10))
    with pytest.raises(InvalidRequestError, match="unknown LoRA adapter"):
        engine.submit(GenerationRequest(prompt="x", adapter="nope"))
    assert engine.waiting == 0


async def test_pins_override_reported_values_only(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine()
    engine.set_pins(Pins(waiting=7, running=3, kv_cache_usage=0.42, running_loras=("x",), max_lora=4))
    g = engine.gauges()
    assert (g.waiting, g.running, g.kv_cache_usage) == (7, 3, 0.42)
    assert engine.waiting == 0 and engine.kv_cache_usage == 0.0
    assert _lora_info(engine) == ("4", "x", "")


async def test_stop_fails_requests_in_flight(clock: ManualClock, make_engine: Callable[..., Engine]) -> None:
    from epp_sim.modelserver import EngineStoppedError

    engine = await started(make_engine())
    h = engine.submit(GenerationRequest(prompt="x", max_tokens=1000))
    await advance(clock, 0.05)
    await engine.stop()
    with pytest.raises(EngineStoppedError):
        await h.wait()


def _lora_info(engine: Engine) -> tuple[str, str, str]:
    """(max_lora, running, waiting) of the newest lora_requests_info series, as GIE reads it."""
    from prometheus_client.parser import text_string_to_metric_families

    text = engine.render_metrics().decode()
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "vllm:lora_requests_info")
    s = max(fam.samples, key=lambda s: s.value)
    return s.labels["max_lora"], s.labels["running_lora_adapters"], s.labels["waiting_lora_adapters"]


async def test_latency_is_a_function_of_load(clock: ManualClock, make_engine: Callable[..., Engine]) -> None:
    """As on vLLM: TTFT grows with the prompt and with the queue ahead, TPOT with the running batch."""
    timing = {"prefill_time_per_token": 0.0005, "decode_time_base": 0.01, "decode_time_per_seq": 0.001}
    engine = await started(make_engine(max_num_seqs=4, max_num_batched_tokens=4096, **timing))
    short = engine.submit(GenerationRequest(prompt="s" * 400, max_tokens=2))  # 100 tokens
    await advance_until(clock, lambda: short.done)
    long = engine.submit(GenerationRequest(prompt="l" * 8000, max_tokens=2))  # 2,000 tokens
    await advance_until(clock, lambda: long.done)
    assert long.ttft is not None and short.ttft is not None
    assert long.ttft > 5 * short.ttft  # the prefill is proportional to the uncached prompt

    queued = [engine.submit(GenerationRequest(prompt=f"q{i} " * 100, max_tokens=40)) for i in range(12)]
    await advance_until(clock, lambda: all(h.done for h in queued))
    ttfts = [h.ttft or 0.0 for h in queued]
    assert ttfts[-1] > 3 * ttfts[0]  # 4 run at once: the last waits for two batches ahead of it

    async def tpot(batch: int) -> float:
        handles = [engine.submit(GenerationRequest(prompt=f"b{batch} {i} " * 10, max_tokens=30)) for i in range(batch)]
        await advance_until(clock, lambda: all(h.ttft is not None for h in handles))
        first = engine.now()
        await advance_until(clock, lambda: all(h.done for h in handles))
        return (engine.now() - first) / 29

    alone, together = await tpot(1), await tpot(4)
    assert together > alone * 1.2  # each running sequence adds its decode time to every step
