"""Precise prefix routing end to end: simulated vLLM pods publish KV events over real ZMQ, the
picker's plugin chain (token-producer → precise-prefix-cache-producer → prefix-cache-scorer)
subscribes and schedules. Prompts are sent to the pods directly, so the approximate index never
sees them: only the events can explain each decision.
"""

from __future__ import annotations

import random
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from epp.config.loader import LoadedConfig, load_config
from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.framework.request import ApiKind, InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins import register_in_tree
from epp.plugins.precise_prefix_producer import PrecisePrefixCacheProducer
from epp.telemetry.metrics import EppMetrics
from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.precise_prefix import (
    MODEL,
    SERVING_LABELS,
    events_applied,
    kv_events_sim_config,
    precise_picker_config,
    wait_subscribed,
)
from epp_sim.tiny_tokenizer import sentence, write_tiny_tokenizer
from epp_sim.waits import wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@dataclass
class Replica:
    """One picker's plugins (what one ``epp serve`` replica holds), subscribed to every pod."""

    config: LoadedConfig
    candidates: list[EndpointState]
    metrics: EppMetrics = field(default_factory=EppMetrics)

    def scrape(self, name: str, pod: str = "ns/pod0-rank-0") -> float | None:
        """One KV-event series of this replica's ``/metrics``, as the runtime refreshes it before a scrape."""
        producer = self.producer
        self.metrics.set_kv_events(producer.subscribers.values(), [producer.index])
        return self.metrics.registry.get_sample_value(name, {"pod_identifier": pod} if pod else {})

    @property
    def producer(self) -> PrecisePrefixCacheProducer:
        plugin = self.config.plugins["precise-prefix-cache-producer"]
        assert isinstance(plugin, PrecisePrefixCacheProducer)
        return plugin

    async def pick(self, prompt: str) -> str:
        request = InferenceRequest("r", model=MODEL, target_model=MODEL, api=ApiKind.COMPLETIONS)
        request.body = {"model": MODEL, "prompt": prompt}
        for producer in self.config.data_producers:
            await producer.produce(request)
        result = self.config.scheduler.schedule(request, self.candidates, cycle=CycleState())
        return result.primary.targets[0].endpoint.address

    def matched(self, prompt_ids: Sequence[int], address: str) -> bool:
        return self.producer.index.longest_prefix(self._key(address), self._keys(prompt_ids)) > 0

    def _key(self, address: str) -> str:
        return next(c.endpoint.key for c in self.candidates if c.endpoint.address == address)

    def _keys(self, ids: Sequence[int]) -> list[int]:
        from epp.kvevents.index import block_keys, chain_seed

        return block_keys(ids, self.producer.block_size_tokens, chain_seed(MODEL))

    def synced(self, servers: Sequence[ModelServer]) -> bool:
        """Every published message has been applied (the subscriber's seq caught up with the publisher's)."""
        return events_applied(self.producer.subscribers.values(), servers)


class Cluster:
    def __init__(self, tokenizer: Path, port: int, replay_port: int, num_blocks: int) -> None:
        self.tokenizer = tokenizer
        self.port = port
        self.replay_port = replay_port
        self.num_blocks = num_blocks
        self.servers: list[ModelServer] = []
        self.replicas: list[Replica] = []
        self.client = httpx.AsyncClient(timeout=10)

    def sim_config(self, host: str) -> SimConfig:
        return kv_events_sim_config(
            self.tokenizer, host, self.port, replay_port=self.replay_port, num_blocks=self.num_blocks
        )

    async def send(self, server: ModelServer, prompt: str) -> None:
        response = await self.client.post(
            f"{server.url}/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 1}
        )
        assert response.status_code == 200, response.text

    async def tokens(self, server: ModelServer, prompt: str) -> list[int]:
        response = await self.client.post(
            f"{server.url}/v1/completions/render", json={"model": MODEL, "prompt": prompt}
        )
        ids: list[int] = response.json()[0]["token_ids"]
        return ids

    def add_replica(self) -> Replica:
        registry = PluginRegistry()
        register_in_tree(registry)
        config = load_config(
            precise_picker_config(self.tokenizer, self.port, replay_port=self.replay_port), registry, PluginContext()
        )
        candidates = [
            EndpointState(Endpoint("ns", f"pod{i}-rank-0", f"pod{i}", s.host, s.port, labels=SERVING_LABELS))
            for i, s in enumerate(self.servers)
        ]
        for observer in config.endpoints_added:
            observer.endpoints_added(candidates)
        replica = Replica(config, candidates)
        self.replicas.append(replica)
        return replica

    async def synced(self) -> None:
        await wait_until(
            lambda: all(r.synced(self.servers) for r in self.replicas), timeout=10, message="replicas synced"
        )


@asynccontextmanager
async def cluster(
    tokenizer: Path, *, pods: int = 3, replicas: int = 1, replay: bool = False, num_blocks: int = 256
) -> AsyncIterator[Cluster]:
    c = Cluster(tokenizer, _free_port(), _free_port() if replay else 0, num_blocks)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(c.client.aclose)
        for i in range(pods):
            server = ModelServer(c.sim_config(f"127.0.0.{i + 2}"), host=f"127.0.0.{i + 2}")
            c.servers.append(await stack.enter_async_context(server))
        for _ in range(replicas):
            replica = c.add_replica()
            for closable in replica.config.closables:
                stack.push_async_callback(closable.aclose)
        await wait_subscribed(c.servers, c.send, lambda: [r.producer.subscribers.values() for r in c.replicas])
        yield c


def _prompt(seed: int, words: int = 120) -> str:
    return sentence(random.Random(seed), words)


async def test_announced_prefix_is_routed_to_its_pod_and_eviction_moves_it(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, num_blocks=96) as c:
        (replica,) = c.replicas
        prompt = _prompt(1)
        ids = await c.tokens(c.servers[1], prompt)
        assert len(ids) >= 64  # several blocks
        await c.send(c.servers[1], prompt)
        await c.synced()
        assert replica.matched(ids, "127.0.0.3")
        # The approximate index never saw the prompt; the events alone send the follow-up to pod 1.
        scorer = replica.config.plugins["prefix-cache-scorer"]
        assert scorer.index_size == 0  # type: ignore[attr-defined]
        assert await replica.pick(prompt + " and a new question") == "127.0.0.3"

        # Pod 1 evicts it (other prompts fill its 96 blocks); pod 2 now holds it.
        for seed in range(100, 112):
            await c.send(c.servers[1], _prompt(seed))
        await c.synced()
        assert not replica.matched(ids, "127.0.0.3")
        await c.send(c.servers[2], prompt)
        await c.synced()
        assert await replica.pick(prompt + " and a new question") == "127.0.0.4"


async def test_publisher_restart_clears_the_pod_and_new_events_route_again(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=2) as c:
        (replica,) = c.replicas
        prompt = _prompt(2)
        ids = await c.tokens(c.servers[0], prompt)
        await c.send(c.servers[0], prompt)
        await c.synced()
        assert replica.matched(ids, "127.0.0.2")
        subscriber = replica.producer.subscribers["ns/pod0-rank-0"]

        old = c.servers[0]
        await old.stop()
        restarted = ModelServer(c.sim_config(old.host), host=old.host, port=old.port)
        await restarted.start()
        try:
            c.servers[0] = restarted
            n = 0

            async def restart_seen() -> bool:
                nonlocal n
                n += 1
                await c.send(restarted, f"after restart {n} " + _prompt(500 + n, 30))
                # Seen as the connection dropping (or, had it missed nothing, seq going backwards).
                return subscriber.disconnects + subscriber.restarts >= 1 and replica.synced(c.servers)

            await wait_until(restart_seen, timeout=15, interval=0.05, message="restart detected")
            # The new process holds nothing it was not sent: the old entries are gone.
            assert not replica.matched(ids, "127.0.0.2")
            fresh = _prompt(3)
            await c.send(restarted, fresh)
            await c.synced()
            assert await replica.pick(fresh + " more") == "127.0.0.2"
        finally:
            await restarted.stop()


async def test_a_dropped_message_clears_the_pod_without_replay(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=2) as c:
        (replica,) = c.replicas
        kept, lost = _prompt(4), _prompt(5)
        kept_ids, lost_ids = await c.tokens(c.servers[0], kept), await c.tokens(c.servers[0], lost)
        await c.send(c.servers[0], kept)
        await c.synced()
        assert replica.matched(kept_ids, "127.0.0.2")
        publisher = c.servers[0].kv_events
        assert publisher is not None
        publisher.drop_next = 1  # the message announcing `lost` never reaches the subscriber
        await c.send(c.servers[0], lost)
        await c.send(c.servers[0], _prompt(6))
        await c.synced()
        subscriber = replica.producer.subscribers["ns/pod0-rank-0"]
        assert subscriber.gaps == 1
        # Entries from before the gap are unknown now: not kept silently.
        assert not replica.matched(kept_ids, "127.0.0.2")
        assert not replica.matched(lost_ids, "127.0.0.2")
        # ... and /metrics says so, for that endpoint only.
        assert replica.scrape("epp_kv_events_gaps_total") == 1
        assert replica.scrape("epp_kv_events_gaps_total", "ns/pod1-rank-0") == 0
        assert replica.scrape("epp_kv_events_replays_total") == 0
        received = replica.scrape("llm_d_epp_kv_cache_events_messages_received_total")
        assert received == subscriber.messages and received == publisher.seq - 1  # all but the dropped one
        blocks = replica.producer.index.blocks("ns/pod0-rank-0")
        assert blocks > 0 and replica.scrape("epp_kv_events_index_blocks") == blocks  # only what came after


async def test_an_undecodable_message_counts_as_a_decode_error_and_clears_the_pod(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=2) as c:
        (replica,) = c.replicas
        kept = _prompt(9)
        kept_ids = await c.tokens(c.servers[0], kept)
        await c.send(c.servers[0], kept)
        await c.synced()
        assert replica.matched(kept_ids, "127.0.0.2")
        assert replica.scrape("epp_kv_events_index_blocks") == replica.producer.index.blocks("ns/pod0-rank-0") > 0
        assert replica.scrape("llm_d_epp_kv_cache_events_active_subscribers", pod="") == 2
        publisher = c.servers[0].kv_events
        assert publisher is not None
        publisher.publish([["BlockMangled", [1], None]])  # an event type vLLM never sends
        await c.synced()
        assert replica.scrape("epp_kv_events_decode_errors_total") == 1
        assert replica.scrape("epp_kv_events_decode_errors_total", "ns/pod1-rank-0") == 0
        assert replica.scrape("epp_kv_events_gaps_total") == 0
        assert not replica.matched(kept_ids, "127.0.0.2")
        assert replica.scrape("epp_kv_events_index_blocks") == 0
        # The endpoint leaves: its subscriber and its series go.
        for observer in replica.config.endpoint_observers:
            observer.endpoints_removed(["ns/pod0-rank-0"])
        assert replica.scrape("epp_kv_events_decode_errors_total") is None
        assert replica.scrape("llm_d_epp_kv_cache_events_active_subscribers", pod="") == 1


async def test_a_dropped_message_is_replayed(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=2, replay=True) as c:
        (replica,) = c.replicas
        lost = _prompt(7)
        lost_ids = await c.tokens(c.servers[0], lost)
        publisher = c.servers[0].kv_events
        assert publisher is not None
        publisher.drop_next = 1
        await c.send(c.servers[0], lost)
        await c.send(c.servers[0], _prompt(8))
        await c.synced()
        subscriber = replica.producer.subscribers["ns/pod0-rank-0"]
        assert (subscriber.gaps, subscriber.replays) == (1, 1)
        assert (replica.scrape("epp_kv_events_gaps_total"), replica.scrape("epp_kv_events_replays_total")) == (1, 1)
        assert replica.matched(lost_ids, "127.0.0.2")
        assert await replica.pick(lost + " follow-up") == "127.0.0.2"


async def test_two_replicas_agree_on_100_of_100_prompts(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=3, replicas=2, num_blocks=4096) as c:
        rng = random.Random(42)
        prompts: list[tuple[str, str]] = []
        for i in range(100):
            server = c.servers[rng.randrange(3)]
            prompt = f"conversation {i}: " + _prompt(1000 + i, 60)
            await c.send(server, prompt)
            prompts.append((prompt, server.host))
        await c.synced()
        first, second = c.replicas
        picks = [(await first.pick(p + " next turn"), await second.pick(p + " next turn")) for p, _ in prompts]
        assert sum(a == b for a, b in picks) == 100
        assert [a for a, _ in picks] == [holder for _, holder in prompts]
