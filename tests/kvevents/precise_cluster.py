"""A small precise-routing cluster for the KV-event tests: simulated vLLM pods publishing KV events
over real ZMQ, and picker replicas (each one ``epp serve``'s plugins, built from a configuration
in either form: llm-d's chain or its deprecated all-in-one scorer) subscribed to every pod, or,
in llm-d's central mode, one replica binding the socket every pod connects to."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from epp.config.loader import LoadedConfig, load_config
from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.framework.request import ApiKind, InferenceRequest
from epp.framework.scheduling import CycleState
from epp.kvevents.index import block_keys, chain_seed
from epp.plugins import register_in_tree
from epp.plugins.precise_prefix_producer import PrecisePrefixCacheProducer
from epp.plugins.precise_prefix_scorer import PrecisePrefixCacheScorer
from epp.requestcontrol.plugin_series import PluginSeries, Readings
from epp.telemetry.metrics import EppMetrics
from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.ports import free_port
from epp_sim.precise_prefix import (
    CHAIN,
    MODEL,
    SERVING_LABELS,
    events_applied,
    kv_events_sim_config,
    precise_picker_config,
    wait_subscribed,
)
from epp_sim.tiny_tokenizer import sentence
from epp_sim.waits import wait_until


@dataclass
class Replica:
    """One picker's plugins (what one ``epp serve`` replica holds), subscribed to every pod."""

    config: LoadedConfig
    candidates: list[EndpointState]
    metrics: EppMetrics = field(default_factory=EppMetrics)

    def scrape(self, name: str, pod: str = "ns/pod0-rank-0") -> float | None:
        """One KV-event series of this replica's ``/metrics``, as the runtime refreshes it before a scrape."""
        self.metrics.series(PluginSeries).publish(Readings.of(self.config.measured))
        return self.metrics.registry.get_sample_value(name, {"pod_identifier": pod} if pod else {})

    @property
    def producer(self) -> PrecisePrefixCacheProducer:
        """The producer of either form (the all-in-one holds its own)."""
        plugins = self.config.plugins
        plugin = plugins.get("precise-prefix-cache-producer") or plugins["precise-prefix-cache-scorer"]
        producer = plugin.producer if isinstance(plugin, PrecisePrefixCacheScorer) else plugin
        assert isinstance(producer, PrecisePrefixCacheProducer)
        return producer

    async def request(self, prompt: str) -> InferenceRequest:
        """A completions request for ``prompt``, through the configuration's data producers (tokens)."""
        request = InferenceRequest("r", model=MODEL, target_model=MODEL, api=ApiKind.COMPLETIONS)
        request.body = {"model": MODEL, "prompt": prompt}
        for producer in self.config.data_producers:
            await producer.produce(request, self.candidates)
        return request

    async def pick(self, prompt: str) -> str:
        request = await self.request(prompt)
        result = self.config.scheduler.schedule(request, self.candidates, cycle=CycleState())
        return result.primary.targets[0].endpoint.address

    def matched(self, prompt_ids: Sequence[int], address: str) -> bool:
        return self.producer.index.longest_prefix(self._key(address), self._keys(prompt_ids)) > 0

    def _key(self, address: str) -> str:
        return next(c.endpoint.key for c in self.candidates if c.endpoint.address == address)

    def _keys(self, ids: Sequence[int]) -> list[int]:
        return block_keys(ids, self.producer.block_size_tokens, chain_seed(MODEL))

    def synced(self, servers: Sequence[ModelServer]) -> bool:
        """Every published message has been applied (the subscriber's seq caught up with the publisher's)."""
        return events_applied(self.producer.event_sources(), servers)


class Cluster:
    def __init__(
        self, tokenizer: Path, port: int, replay_port: int, num_blocks: int, central: str = "", index: str = ""
    ) -> None:
        self.tokenizer = tokenizer
        self.index = index
        self.port = port
        self.replay_port = replay_port
        self.num_blocks = num_blocks
        self.central = central
        self.servers: list[ModelServer] = []
        self.replicas: list[Replica] = []
        self.client = httpx.AsyncClient(timeout=10)

    def sim_config(self, host: str, port: int = 0) -> SimConfig:
        return kv_events_sim_config(
            self.tokenizer,
            host,
            self.port,
            replay_port=self.replay_port,
            num_blocks=self.num_blocks,
            central=self.central,
            port=port,
        )

    async def send(self, server: ModelServer, prompt: str) -> None:
        response = await self.client.post(
            f"{server.url}/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 1}
        )
        assert response.status_code == 200, response.text

    async def lose_one(self, server: ModelServer, lost: str, after: str) -> None:
        """Send ``lost`` with its announcement dropped on the way (as ZMQ drops one), then ``after``; wait for sync."""
        publisher = server.kv_events
        assert publisher is not None
        publisher.drop_next = 1
        await self.send(server, lost)
        await self.send(server, after)
        await self.synced()

    async def tokens(self, server: ModelServer, prompt: str) -> list[int]:
        response = await self.client.post(
            f"{server.url}/v1/completions/render", json={"model": MODEL, "prompt": prompt}
        )
        ids: list[int] = response.json()[0]["token_ids"]
        return ids

    def add_replica(self, form: str = CHAIN) -> Replica:
        registry = PluginRegistry()
        register_in_tree(registry)
        text = precise_picker_config(
            self.tokenizer, self.port, replay_port=self.replay_port, form=form, central=self.central, index=self.index
        )
        config = load_config(text, registry, PluginContext())
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
    tokenizer: Path,
    *,
    pods: int = 3,
    replicas: Sequence[str] = (CHAIN,),
    replay: bool = False,
    num_blocks: int = 256,
    central: bool = False,
    index: str = "",
) -> AsyncIterator[Cluster]:
    """``pods`` simulated vLLM pods publishing KV events, and one picker replica per entry of ``replicas``
    (its form), each subscribed to every pod; with ``central``, the replica binds one socket and the
    pods connect to it (llm-d's ``zmqEndpoint``), their topics naming them ``ip:port``; with ``index``
    (a Valkey/Redis address) the replicas' KV-block index lives on that server."""
    endpoint = f"tcp://127.0.0.1:{free_port()}" if central else ""
    c = Cluster(tokenizer, free_port(), free_port() if replay else 0, num_blocks, endpoint, index)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(c.client.aclose)
        for i in range(pods):
            host = f"127.0.0.{i + 2}"
            port = free_port(host)
            server = ModelServer(c.sim_config(host, port), host=host, port=port)
            c.servers.append(await stack.enter_async_context(server))
        for form in replicas:
            replica = c.add_replica(form)
            for closable in replica.config.closables:
                stack.push_async_callback(closable.aclose)
        await wait_subscribed(c.servers, c.send, lambda: [r.producer.event_sources() for r in c.replicas])
        yield c


def sample_prompt(seed: int, words: int = 120) -> str:
    return sentence(random.Random(seed), words)
