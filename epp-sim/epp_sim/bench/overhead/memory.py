"""Memory per request: RSS slopes of the picker and the no-op, behind a stock Envoy and a graceful one.

A picker is a long-running process behind gateways we do not configure, so its memory must stay
flat under load whatever the gateway does. The soak starts its own four pairs, so the main
rounds' processes are not mixed in: a no-op processor and an ``epp serve``, each behind a
stock Envoy (it resets finished ext_proc streams) and each behind an Envoy with the runtime guard
``ext_proc_graceful_grpc_close`` (it half-closes and lets the processor end the stream). The
pairs take turns, one chunk of closed-loop load at a time, so machine noise hits all four alike.
After each chunk the processor's RSS is sampled against the requests it has served; the slope
of a least-squares line through the samples past the first fifth of the requests (allocator
warm-up, caches filling) is the growth in bytes per request: a leak shows as a slope that stays
above zero however long the soak.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from epp_sim.bench.loadtools import LoadGenerator
from epp_sim.bench.overhead.options import OverheadOptions, prompt_body
from epp_sim.bench.overhead.stack import Stack, pod_addresses, start_envoy, start_noop, start_picker
from epp_sim.bench.procstat import rss_bytes
from epp_sim.stack.envoy import EnvoyProcess
from epp_sim.stack.envoy_config import ExtProcTarget, envoy_bootstrap
from epp_sim.stack.processes import ChildProcess

__all__ = ["PAIRS", "memory_soak", "rss_slope"]

PAIRS = (("noop", "stock"), ("epp", "stock"), ("noop", "graceful"), ("epp", "graceful"))
"""(processor, Envoy) pairs, in the order each round drives them."""

_CONCURRENCY = 16


@dataclass
class _Pair:
    processor: ChildProcess
    envoy: EnvoyProcess
    requests: int = 0
    samples: list[tuple[int, int]] = field(default_factory=list)  # (requests so far, RSS bytes)


def rss_slope(samples: list[tuple[int, int]], *, skip_fraction: float = 0.2) -> float | None:
    """Bytes of RSS per request: the least-squares slope past the first ``skip_fraction`` of the requests."""
    if not samples:
        return None
    start = samples[-1][0] * skip_fraction
    points = [(float(n), float(rss)) for n, rss in samples if n >= start]
    if len(points) < 3:
        return None
    mean_n = sum(n for n, _ in points) / len(points)
    mean_rss = sum(r for _, r in points) / len(points)
    spread = sum((n - mean_n) ** 2 for n, _ in points)
    if spread == 0:
        return None
    return sum((n - mean_n) * (r - mean_rss) for n, r in points) / spread


async def _start_pairs(
    options: OverheadOptions, exit: AsyncExitStack, stack: Stack, session: aiohttp.ClientSession
) -> dict[str, _Pair]:
    pairs: dict[str, _Pair] = {}
    destination = pod_addresses(options.endpoints, stack.backend_port)
    for processor_name, flavour in PAIRS:
        name = f"soak-{processor_name}-{flavour}"
        if processor_name == "noop":
            processor, port = await start_noop(exit, stack.work, name, destination)
        else:
            processor, port, _ = await start_picker(
                exit, stack.work, name, kubeconfig=stack.kubeconfig, backend_port=stack.backend_port, session=session
            )
        bootstrap = envoy_bootstrap(
            listen_port=0,
            ext_proc=ExtProcTarget("127.0.0.1", port),
            admin_port=0,
            graceful_ext_proc_close=flavour == "graceful",
        )
        envoy = await start_envoy(exit, stack.work, name, bootstrap, session)
        pairs[f"{processor_name}/{flavour}"] = _Pair(processor, envoy)
    return pairs


async def memory_soak(options: OverheadOptions, stack: Stack, loads: LoadGenerator) -> dict[str, Any]:
    """Drive the four pairs in turn for ``soak_seconds`` in all; each processor's RSS slope per request."""
    body_file = stack.work / "body-soak.json"
    await asyncio.to_thread(body_file.write_bytes, prompt_body(1024))
    async with (
        AsyncExitStack() as exit,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
    ):
        pairs = await _start_pairs(options, exit, stack, session)
        chunk = max(1.0, options.soak_sample_seconds)
        started = time.monotonic()
        while time.monotonic() - started < options.soak_seconds:
            for pair in pairs.values():
                result = await loads.http(
                    f"127.0.0.1:{pair.envoy.port}", body_file, concurrency=_CONCURRENCY, duration=chunk
                )
                pair.requests += result.requests
                pair.samples.append((pair.requests, rss_bytes(pair.processor.pid)))
        elapsed = time.monotonic() - started
    return {
        "seconds": round(elapsed, 1),
        "chunk_seconds": chunk,
        "concurrency": _CONCURRENCY,
        "pairs": {
            name: {
                "requests": pair.requests,
                "rss_first_mib": pair.samples[0][1] / 2**20 if pair.samples else None,
                "rss_last_mib": pair.samples[-1][1] / 2**20 if pair.samples else None,
                "rss_slope_bytes_per_request": rss_slope(pair.samples),
                "samples": pair.samples,
            }
            for name, pair in pairs.items()
        },
    }
