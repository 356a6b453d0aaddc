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
from epp_sim.bench.procstat import cpu_seconds
from epp_sim.tiny_tokenizer import sentence, write_tiny_tokenizer

__all__ = ["main", "measure"]

MODES = ("encode", "threads-1", "threads-2", "process-2")

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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m epp_sim.bench.tokenize_cost", description=__doc__)
    parser.add_argument("--prompt-kib", type=int, default=400)
    parser.add_argument("--prompts", type=int, default=4, help="prompts encoded at once per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokenizer", type=Path, default=None, help="a tokenizer.json (default: the bench's tiny one)")
    args = parser.parse_args(argv)
    result = asyncio.run(
        measure(prompt_kib=args.prompt_kib, prompts=args.prompts, rounds=args.rounds, tokenizer=args.tokenizer)
    )
    print(f"{args.prompt_kib} KiB prompts, {result['tokens_per_prompt']} tokens, load average {result['load_average']}")
    print(f"{'mode':<10} {'CPU ms/prompt':>14} {'serving ms':>11} {'prompts/s':>10}")
    for mode, m in result["modes"].items():
        print(f"{mode:<10} {m['cpu_ms']:>14.1f} {m['parent_ms']:>11.1f} {m['per_s']:>10.2f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
