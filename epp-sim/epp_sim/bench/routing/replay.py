"""Replaying one seeded workload through a strategy: each arrival released at its time, routed, sent.

Arrivals go out at their scaled times whether or not earlier ones finished (an open loop, as
real traffic), each routed by the strategy's :data:`~epp_sim.bench.routing.strategies.Route` (its
data producers awaited first, as ``epp serve`` does) and sent straight to the chosen simulator
as a streaming chat completion with the headers the decision adds (a P/D decision's
``x-prefiller-host-port``), so the client sees the time to the first content token (from the
arrival: time waiting in the picker's flow-control queue included), the gaps between content
chunks (the inter-token latency: each chunk's gap divided by the tokens it carries), the time per
output token after the first, the end-to-end latency and the usage, by service class and by
tenant, and whether each met its objectives (the SLO headers, in simulated ms; a request without
any meets them by completing). When a response completes, the strategy is told its usage and its
timing (when it was routed, its first body byte, its end), as the ext_proc stream tells the
pipeline. Arrivals in the warm-up window are sent but not recorded.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from epp.errors import EppError
from epp.framework.response import ResponseTiming, Usage
from epp_sim.bench.routing.options import RoutingOptions
from epp_sim.bench.routing.strategies import Route
from epp_sim.bench.workloads import Arrival

__all__ = ["Counts", "Outcome", "replay"]

_COMPLETION_TOKENS = re.compile(rb'"completion_tokens":(\d+)')
_CONTENT = b'"delta":{"content":'
_MAX_GAPS = 200_000
"""Inter-token gaps kept per run (a sample beyond that: every gap would be millions at high load)."""


@dataclass
class Outcome:
    """What the client saw of the recorded arrivals; times in wall-clock seconds (loop time)."""

    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    """Gaps between consecutive content chunks of a stream, each divided by the chunks it carries."""
    output_tokens: int = 0
    shed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    route_seconds: float = 0.0
    routed: int = 0
    first_arrival: float = 0.0
    last_finish: float = 0.0
    arrivals: int = 0
    """Arrivals after the warm-up (the ones recorded)."""
    classes: dict[str, Counts] = field(default_factory=dict)
    """By service class (``critical``, ``sheddable``, ``standard``)."""
    tenants: dict[str, Counts] = field(default_factory=dict)
    """By fairness id."""
    class_tenants: dict[str, dict[str, Counts]] = field(default_factory=dict)
    """By service class, then fairness id: fairness is judged inside a priority band."""

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def counts(self, arrival: Arrival) -> tuple[Counts, Counts, Counts]:
        """The class, tenant, and class-and-tenant tallies of ``arrival``."""
        cls, tenant = arrival.service_class, arrival.tenant
        in_class = self.class_tenants.setdefault(cls, {})
        return (
            self.classes.setdefault(cls, Counts()),
            self.tenants.setdefault(tenant, Counts()),
            in_class.setdefault(tenant, Counts()),
        )


@dataclass
class Counts:
    """One class's or tenant's requests: offered, served (completed), dropped (refused by the picker), TTFTs."""

    offered: int = 0
    served: int = 0
    dropped: int = 0
    met: int = 0
    """Served within the request's objectives (every served request without objectives)."""
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    """Time per output token after the first, of served requests with more than one."""


async def _send(
    session: aiohttp.ClientSession,
    route: Route,
    index: int,
    arrival: Arrival,
    outcome: Outcome | None,
    scale: float,
) -> None:
    """Route and send one arrival; record it in ``outcome`` (None: a warm-up request, not recorded).

    ``scale``: the time scale (simulated seconds per wall second), to judge the simulated-ms objectives.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    if outcome is None:
        outcome = Outcome()  # a scratch record for warm-up traffic, thrown away
    tallies = outcome.counts(arrival)
    for tally in tallies:
        tally.offered += 1
    try:
        routed = await route(index, arrival)
    except EppError as e:
        for tally in tallies:
            tally.dropped += 1
        if e.code.http_status == 429:
            outcome.shed += 1
        else:
            outcome.error(e.code.name.lower())
        return
    outcome.route_seconds += loop.time() - started
    outcome.routed += 1
    routed_at = time.perf_counter()
    first_byte: float | None = None
    first: float | None = None
    previous = 0.0
    gaps: list[float] = []
    tail = b""
    status = 0
    answer: tuple[Usage, ResponseTiming] | None = None
    try:
        async with session.post(
            f"http://{routed.destination}/v1/chat/completions",
            data=arrival.data,
            headers={"content-type": "application/json", **arrival.headers, **routed.headers},
        ) as resp:
            status = resp.status
            if resp.status != 200:
                outcome.error(f"http_{resp.status}")
                await resp.read()
                return
            async for chunk in resp.content.iter_any():
                if first_byte is None:
                    first_byte = time.perf_counter()
                contents = chunk.count(_CONTENT)
                if contents:
                    now = loop.time()
                    if first is None:
                        first = now  # tokens read with the first one have no gap of their own
                    else:
                        gaps.extend([(now - previous) / contents] * contents)
                    previous = now
                tail = (tail + chunk)[-1024:]
            match = _COMPLETION_TOKENS.search(tail)
            if match is not None:
                answer = (
                    Usage(completion_tokens=int(match.group(1))),
                    ResponseTiming(routed_at, first_byte, time.perf_counter()),
                )
    except aiohttp.ClientError as e:
        outcome.error(type(e).__name__)
        return
    finally:
        routed.finished(status, *(answer if answer is not None else (None, None)))
    end = loop.time()
    if first is None or answer is None:
        outcome.error("incomplete_stream")
        return
    tokens = answer[0].completion_tokens
    ttft = first - started
    tpot = (end - first) / (tokens - 1) if tokens > 1 else None
    ttft_slo, tpot_slo = arrival.slo_ms
    met = (not ttft_slo or ttft * scale * 1000 <= ttft_slo) and (
        not tpot_slo or tpot is None or tpot * scale * 1000 <= tpot_slo
    )
    outcome.ttft.append(ttft)
    for tally in tallies:
        tally.ttft.append(ttft)
        tally.served += 1
        tally.met += met
        if tpot is not None:
            tally.tpot.append(tpot)
    outcome.e2e.append(end - started)
    outcome.output_tokens += tokens
    outcome.last_finish = max(outcome.last_finish, end)
    if len(outcome.itl) < _MAX_GAPS:
        outcome.itl.extend(gaps)


async def replay(
    arrivals: Sequence[Arrival],
    route: Route,
    session: aiohttp.ClientSession,
    options: RoutingOptions,
    snapshot: Callable[[], Coroutine[Any, Any, dict[str, Any]]],
) -> tuple[Outcome, dict[str, Any]]:
    """Release each arrival at its scaled time; wait for all of them, at most ``drain`` after the last.

    Arrivals in the warm-up window are sent but not recorded; the simulators' counters are
    snapshotted when the first recorded arrival goes out, so hit rates cover the same window.
    """
    outcome = Outcome()
    loop = asyncio.get_running_loop()
    start = loop.time()
    warmup = options.warmup_fraction * options.sim_seconds
    baseline: asyncio.Task[dict[str, Any]] | None = None
    tasks: set[asyncio.Task[None]] = set()
    try:
        for index, arrival in enumerate(arrivals):
            delay = start + arrival.at / options.time_scale - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            recorded = arrival.at >= warmup
            if recorded and baseline is None:
                baseline = loop.create_task(snapshot(), name="bench-counters-baseline")
                outcome.first_arrival = loop.time()
                outcome.arrivals = len(arrivals) - index
            task = loop.create_task(
                _send(session, route, index, arrival, outcome if recorded else None, options.time_scale),
                name=f"bench-request-{index}",
            )
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(set(tasks), timeout=options.drain_sim_seconds / options.time_scale)
    finally:
        unfinished = list(tasks)
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
        before = await baseline if baseline is not None else {}
    if unfinished:
        outcome.errors["unfinished"] = len(unfinished)
    return outcome, before
