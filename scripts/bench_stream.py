#!/usr/bin/env python3
"""Microbenchmark: µs of picker CPU per request on the ext_proc path, without gRPC or Envoy.

One request is the messages Envoy sends in the GIE mode for a completion (protocol config with
request headers, the body, response headers, the JSON response body), fed to a real
:class:`~epp.extproc.stream.Stream` with the real pool routing (its pipeline), the default profile and
8 endpoints, on an event loop;
its answers are built as they would be sent. What the picker's own code costs per request, the
part of the picker/no-op gap that is ours to cut (``epp bench overhead`` measures the whole).
Numbers, not assertions: run it before and after touching the hot path.

    .venv/bin/python scripts/bench_stream.py [--prompt-bytes 1024] [--iterations 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable

from bench_scheduler import make_store

from epp.clock import SystemClock
from epp.config.loader import load_default_config
from epp.extproc import pb
from epp.extproc.processor import Processor, StreamOptions
from epp.extproc.stream import Stream
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.plugins import register_in_tree
from epp.requestcontrol.pool_routing import PoolRouting
from epp.requestcontrol.pools import PoolPipelines
from epp.telemetry.metrics import EppMetrics


def _headers(pairs: dict[str, str], *, eos: bool = False) -> pb.HttpHeaders:
    headers = pb.HttpHeaders(end_of_stream=eos)
    for key, value in pairs.items():
        headers.headers.headers.add(key=key, raw_value=value.encode())
    return headers


def request_messages(prompt_bytes: int, rng: random.Random) -> list[pb.ProcessingRequest]:
    """What Envoy sends for one completion whose prompt is ``prompt_bytes`` long (a fresh prompt each time)."""
    words = " ".join(f"w{rng.randrange(10_000)}" for _ in range(prompt_bytes // 6))
    body = json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": words[:prompt_bytes], "max_tokens": 8})
    request_headers = {
        ":method": "POST",
        ":path": "/v1/completions",
        ":authority": "gateway",
        "content-type": "application/json",
        "x-request-id": f"bench-{rng.randrange(1 << 30)}",
    }
    config = pb.ProtocolConfiguration(
        request_body_mode=pb.BODY_FULL_DUPLEX_STREAMED, response_body_mode=pb.BODY_FULL_DUPLEX_STREAMED
    )
    answer = (
        b'{"id":"c","object":"text_completion","model":"meta-llama/Llama-3.1-8B-Instruct",'
        b'"usage":{"prompt_tokens":200,"completion_tokens":8,"total_tokens":208}}'
    )
    return [
        pb.ProcessingRequest(request_headers=_headers(request_headers), protocol_config=config),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=body.encode(), end_of_stream=True)),
        pb.ProcessingRequest(response_headers=_headers({":status": "200", "content-type": "application/json"})),
        pb.ProcessingRequest(response_body=pb.HttpBody(body=answer, end_of_stream=True)),
    ]


async def per_request_us(run: Callable[[], Awaitable[None]], iterations: int) -> float:
    for _ in range(min(iterations, 500)):
        await run()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iterations):
            await run()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt-bytes", type=int, default=1024)
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--endpoints", type=int, default=8)
    asyncio.run(bench(parser.parse_args()))


async def bench(args: argparse.Namespace) -> None:
    clock = SystemClock()
    rng = random.Random(1)
    registry = PluginRegistry()
    register_in_tree(registry)
    metrics = EppMetrics()
    store = make_store(args.endpoints, clock, rng)
    config = load_default_config(registry, PluginContext(clock=clock, seed=1))
    key = ("default", "bench")
    routing = PoolRouting(key, store, config, metrics=metrics, clock=clock, rng=random.Random(2))
    processor = Processor(PoolPipelines({key: routing}), metrics, StreamOptions())
    requests = [request_messages(args.prompt_bytes, rng) for _ in range(64)]
    turn = iter(range(1 << 62))

    async def one_request() -> None:
        stream = Stream(processor)
        for message in requests[next(turn) % len(requests)]:
            for answer in await stream.handle(message):
                answer.SerializeToString()  # what gRPC does to each answer before sending it
        stream.close()

    cost = await per_request_us(one_request, args.iterations)
    print(f"{args.prompt_bytes} B prompt, {args.endpoints} endpoints: {cost:.1f} µs/request")


if __name__ == "__main__":
    main()
