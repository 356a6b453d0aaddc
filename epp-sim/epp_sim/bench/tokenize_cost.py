"""What tokenizing long prompts costs the picker, and how it spreads over cores: threads against processes.

``token-producer``'s local tokenizer (:class:`~epp.tokenize.local.LocalTokenizer`) is what makes
the precise configuration expensive: every unique long prompt is encoded whole. This measures, on
unique prompts of ``--prompt-kib`` KiB (words of the bench's tiny tokenizer, or any
``tokenizer.json`` given with ``--tokenizer``), rounds of ``--prompts`` prompts encoded at once,
each mode once per round, interleaved:

- ``encode``: the tokenizer's plain ``Tokenizer.encode`` on the caller's thread (holds the GIL,
  computes offsets): what the issue's 870 ms per 400 KiB request was made of;
- ``threads-1`` / ``threads-2``: ``LocalTokenizer`` with one and two worker threads
  (``encode_batch_fast``, GIL released), the event loop awaiting them as a request would;
- ``process-2``: two worker processes, the prompt and its ids crossing a pipe, as a process pool
  would serve the picker; ``parent ms`` is what stays in the serving process.

For each: CPU ms per prompt (this process, its threads included; with processes, the workers'
too, from ``/proc``), the serving process's share, and prompts per wall second. Run as
``python -m epp_sim.bench.tokenize_cost``; prints a table and one JSON object.

``--prefix`` measures the token cache instead, on a conversation of each ``--prompt-kib``: every
prompt is the previous one and about 1 KiB more (as an agentic conversation; ``epp bench
scale``'s unique prompts share all but their last few bytes), one request at a time on one
worker thread, CPU from the process clock:

- ``whole``: the whole-prompt cache (what a tokenizer that is not prefix-stable gets): every
  such prompt is encoded whole;
- ``prefix-4k`` / ``prefix-8k`` / ``prefix-16k``: the prefix cache with chunks of that many
  characters (the default is the measured choice);
- ``prefix-cold``: the default prefix cache emptied before each prompt, so every prompt is encoded
  whole through it: what its chunking, hashing and storing add to a prompt nothing serves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from epp.tokenize.local import LocalTokenizer
from epp.tokenize.prefix import DEFAULT_CHUNK_CHARS
from epp_sim.bench.procstat import cpu_seconds
from epp_sim.tiny_tokenizer import sentence, write_tiny_tokenizer

__all__ = ["main", "measure", "measure_prefix"]

MODES = ("encode", "threads-1", "threads-2", "process-2")
PREFIX_MODES = {"whole": 0, "prefix-4k": 4096, "prefix-8k": 8192, "prefix-16k": 16384, "prefix-cold": -1}
"""Mode → chunk characters (0: whole prompts only; -1: the default chunks, emptied before each prompt)."""

_worker: Any = None


def _load_in_worker(path: str) -> None:
    global _worker  # noqa: PLW0603 (one tokenizer per worker process, loaded once)
    from tokenizers import Tokenizer

    _worker = Tokenizer.from_file(path)


def _encode_in_worker(prompt: str) -> bytes:
    (encoding,) = _worker.encode_batch_fast([prompt])
    return array("I", encoding.ids).tobytes()


def _prompts(count: int, kib: int, rng: random.Random) -> list[str]:
    words = kib * 1024 // 6
    return [f"prompt {rng.random()} " + sentence(random.Random(rng.random()), words) for _ in range(count)]


async def _round(mode: str, prompts: Sequence[str], tokenizer_file: Path, pools: dict[str, Any]) -> dict[str, float]:
    me = os.getpid()
    workers: list[int] = []
    if mode == "process-2":
        pool: ProcessPoolExecutor = pools["process-2"]
        workers = [p.pid for p in pool._processes.values() if p.pid is not None]  # noqa: SLF001 (their CPU is the cost)
    before = cpu_seconds(me) + sum(cpu_seconds(p) for p in workers)
    parent_before = cpu_seconds(me)
    start = time.perf_counter()
    if mode == "encode":
        tok = pools["tokenizer"]
        for p in prompts:
            tok.encode(p)
    elif mode.startswith("threads"):
        local: LocalTokenizer = pools[mode]
        await asyncio.gather(*(local.prompt_ids(p) for p in prompts))
    else:
        loop = asyncio.get_running_loop()
        results = await asyncio.gather(*(loop.run_in_executor(pool, _encode_in_worker, p) for p in prompts))
        for data in results:
            array("I").frombytes(data)
    wall = time.perf_counter() - start
    cpu = cpu_seconds(me) + sum(cpu_seconds(p) for p in workers) - before
    parent = cpu_seconds(me) - parent_before
    n = len(prompts)
    return {"cpu_ms": cpu / n * 1000, "parent_ms": parent / n * 1000, "per_s": n / wall}


async def measure(*, prompt_kib: int, prompts: int, rounds: int, tokenizer: Path | None) -> dict[str, Any]:
    """Interleaved rounds of every mode; medians per mode."""
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory(prefix="epp-tokenize-cost-") as tmp:
        file = tokenizer or write_tiny_tokenizer(Path(tmp), vocab_size=1000) / "tokenizer.json"
        if file.is_dir():
            file = file / "tokenizer.json"
        pools: dict[str, Any] = {
            "tokenizer": Tokenizer.from_file(str(file)),
            "threads-1": LocalTokenizer(str(file), workers=1),
            "threads-2": LocalTokenizer(str(file), workers=2),
            "process-2": ProcessPoolExecutor(2, initializer=_load_in_worker, initargs=(str(file),)),
        }
        try:
            loop = asyncio.get_running_loop()
            await asyncio.gather(
                *(loop.run_in_executor(pools["process-2"], _encode_in_worker, "warm") for _ in range(4))
            )
            rng = random.Random(23)
            samples: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
            for _ in range(rounds):
                for mode in MODES:
                    samples[mode].append(await _round(mode, _prompts(prompts, prompt_kib, rng), file, pools))
        finally:
            pools["threads-1"].close()
            pools["threads-2"].close()
            pools["process-2"].shutdown()
    tokens = len(pools["tokenizer"].encode(_prompts(1, prompt_kib, random.Random(0))[0]).ids)

    def median(values: Callable[[dict[str, float]], float], mode: str) -> float:
        ordered = sorted(values(s) for s in samples[mode])
        return ordered[len(ordered) // 2]

    return {
        "prompt_kib": prompt_kib,
        "tokens_per_prompt": tokens,
        "prompts_per_round": prompts,
        "rounds": rounds,
        "load_average": os.getloadavg(),
        "modes": {
            m: {k: median(lambda s, k=k: s[k], m) for k in ("cpu_ms", "parent_ms", "per_s")}  # type: ignore[misc]
            for m in MODES
        },
    }


async def measure_prefix(
    *, prompt_kibs: Sequence[int], prompts: int, rounds: int, tokenizer: Path | None
) -> dict[str, Any]:
    """Per size, interleaved rounds of every prefix mode on the same prompts; median CPU ms per prompt."""
    with tempfile.TemporaryDirectory(prefix="epp-tokenize-cost-") as tmp:
        file = tokenizer or write_tiny_tokenizer(Path(tmp), vocab_size=1000) / "tokenizer.json"
        caches = {mode: LocalTokenizer(str(file), workers=1, cache_max_tokens=16 * 2**20) for mode in PREFIX_MODES}
        for mode, chunk_chars in PREFIX_MODES.items():
            caches[mode].cache.chunk_chars = chunk_chars if chunk_chars >= 0 else DEFAULT_CHUNK_CHARS
        sizes: dict[str, Any] = {}
        try:
            for kib in prompt_kibs:
                rng = random.Random(kib)
                turn = _prompts(1, kib, rng)[0]
                for local in caches.values():
                    await local.prompt_ids(turn)  # each cache has seen the conversation so far
                samples: dict[str, list[float]] = {m: [] for m in PREFIX_MODES}
                for _ in range(rounds):
                    batch = []
                    for _ in range(prompts):  # each turn is the previous one and ~1 KiB more
                        turn += f" turn {rng.random()} " + sentence(rng, 160)
                        batch.append(turn)
                    for mode, local in caches.items():
                        samples[mode].append(await _prefix_round(local, batch, cold=PREFIX_MODES[mode] < 0))
                tokens = len(await caches["whole"].prompt_ids(turn))
                sizes[str(kib)] = {
                    "tokens_per_prompt": tokens,
                    "cpu_ms": {m: sorted(v)[len(v) // 2] for m, v in samples.items()},
                }
        finally:
            for local in caches.values():
                local.close()
    return {"prompts_per_round": prompts, "rounds": rounds, "load_average": os.getloadavg(), "sizes": sizes}


async def _prefix_round(local: LocalTokenizer, batch: Sequence[str], *, cold: bool) -> float:
    cpu = 0.0
    for prompt in batch:
        if cold:
            local.cache.clear()
        before = time.process_time()
        await local.prompt_ids(prompt)
        cpu += time.process_time() - before
    return cpu / len(batch) * 1000


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m epp_sim.bench.tokenize_cost", description=__doc__)
    parser.add_argument(
        "--prompt-kib", type=int, nargs="+", default=[400], help="sizes (--prefix: each; else the first)"
    )
    parser.add_argument("--prompts", type=int, default=4, help="prompts encoded at once per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokenizer", type=Path, default=None, help="a tokenizer.json (default: the bench's tiny one)")
    parser.add_argument(
        "--prefix", action="store_true", help="the token cache's modes on prompts sharing all but 1 KiB"
    )
    args = parser.parse_args(argv)
    if args.prefix:
        _print_prefix(
            asyncio.run(
                measure_prefix(
                    prompt_kibs=args.prompt_kib, prompts=args.prompts, rounds=args.rounds, tokenizer=args.tokenizer
                )
            )
        )
        return
    args.prompt_kib = args.prompt_kib[0]
    result = asyncio.run(
        measure(prompt_kib=args.prompt_kib, prompts=args.prompts, rounds=args.rounds, tokenizer=args.tokenizer)
    )
    print(f"{args.prompt_kib} KiB prompts, {result['tokens_per_prompt']} tokens, load average {result['load_average']}")
    print(f"{'mode':<10} {'CPU ms/prompt':>14} {'serving ms':>11} {'prompts/s':>10}")
    for mode, m in result["modes"].items():
        print(f"{mode:<10} {m['cpu_ms']:>14.1f} {m['parent_ms']:>11.1f} {m['per_s']:>10.2f}")
    print(json.dumps(result))


def _print_prefix(result: dict[str, Any]) -> None:
    print(f"a conversation: each prompt is the previous one and ~1 KiB more; load average {result['load_average']}")
    print(f"{'KiB':>5} {'tokens':>7} " + " ".join(f"{m:>11}" for m in PREFIX_MODES) + "  (CPU ms per prompt)")
    for kib, size in result["sizes"].items():
        cells = " ".join(f"{size['cpu_ms'][m]:>11.2f}" for m in PREFIX_MODES)
        print(f"{kib:>5} {size['tokens_per_prompt']:>7} {cells}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
