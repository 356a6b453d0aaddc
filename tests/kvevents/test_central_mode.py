"""llm-d's central KV-event mode: the picker binds ``zmqEndpoint``, every simulated pod connects to it.

Messages are attributed by the topic's ``kv@<ip>:<port>@<model>`` (the pods' own ``ip:port``),
as llm-d's samples set it; each pod's sequence numbers are tracked on their own although one
socket interleaves them. Prompts are sent to the pods directly, so only the events explain a pick.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq
import zmq.asyncio
from precise_cluster import cluster, sample_prompt

from epp.config.loader import load_config
from epp.framework.plugin import PluginConfigError, PluginContext, PluginRegistry
from epp.plugins import register_in_tree
from epp.plugins.precise_prefix_producer import PrecisePrefixCacheProducer
from epp_sim.modelserver import ModelServer
from epp_sim.ports import free_port
from epp_sim.precise_prefix import precise_picker_config
from epp_sim.waits import wait_until


async def test_each_pods_events_are_attributed_by_its_topic_and_route_there(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=3, central=True) as c:
        (replica,) = c.replicas
        producer = replica.producer
        assert producer.subscribers == {} and producer.active_subscribers == 1  # one bound socket, no dialling
        for i, server in enumerate(c.servers):
            prompt = sample_prompt(20 + i)
            await c.send(server, prompt)
            await c.synced()
            assert replica.matched(await c.tokens(server, prompt), server.host)
            assert await replica.pick(prompt + " and then?") == server.host
        assert sorted(s.source for s in producer.event_sources()) == sorted(s.address for s in c.servers)
        assert replica.scrape("llm_d_epp_kv_cache_events_active_subscribers", pod="") == 1
        received = replica.scrape("llm_d_epp_kv_cache_events_messages_received_total", "ns/pod1-rank-0")
        await c.send(c.servers[1], sample_prompt(29))  # one engine step announcing it: one message
        await c.synced()
        assert replica.scrape("llm_d_epp_kv_cache_events_messages_received_total", "ns/pod1-rank-0") == received + 1


async def test_a_gap_or_a_restart_clears_only_that_pod(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=2, central=True) as c:
        (replica,) = c.replicas
        kept, lost = sample_prompt(30), sample_prompt(31)
        other = sample_prompt(32)
        await c.send(c.servers[0], kept)
        await c.send(c.servers[1], other)
        await c.synced()
        await c.lose_one(c.servers[0], lost, sample_prompt(33))  # the message announcing `lost` never arrives
        stream = replica.producer.central.streams["ns/pod0-rank-0"]  # type: ignore[union-attr]
        assert stream.counts.gaps == 1
        assert not replica.matched(await c.tokens(c.servers[0], kept), "127.0.0.2")  # unknown now: cleared
        assert replica.matched(await c.tokens(c.servers[1], other), "127.0.0.3")  # the other pod keeps its own
        assert replica.scrape("epp_kv_events_gaps_total") == 1

        # Pod 0 restarts on the same address: its seq starts again from 0 on the same socket.
        old = c.servers[0]
        await old.stop()
        restarted = ModelServer(c.sim_config(old.host, old.port), host=old.host, port=old.port)
        await restarted.start()
        try:
            c.servers[0] = restarted
            fresh = sample_prompt(34)

            async def restart_seen() -> bool:
                await c.send(restarted, fresh)
                return stream.counts.restarts >= 1 and replica.synced(c.servers)

            await wait_until(restart_seen, timeout=15, interval=0.05, message="restart seen on the central socket")
            assert await replica.pick(fresh + " more") == "127.0.0.2"
        finally:
            await restarted.stop()


async def test_messages_naming_no_endpoint_are_dropped_and_counted(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=1, central=True) as c:
        (replica,) = c.replicas
        central = replica.producer.central
        assert central is not None
        context = zmq.asyncio.Context()
        stranger = context.socket(zmq.PUB)
        try:
            stranger.connect(c.central)
            blocks = len(replica.producer.index)

            async def dropped() -> bool:  # resent until the subscription has reached this publisher
                await stranger.send_multipart([b"kv@10.9.9.9:8000@tiny-model", (0).to_bytes(8, "big"), b"\x90"])
                return central.unattributed > 0

            await wait_until(dropped, timeout=10, interval=0.05, message="the stranger's message arrived")
            assert len(replica.producer.index) == blocks
            assert "ns/pod0-rank-0" in central.streams and len(central.streams) == 1
        finally:
            stranger.close(linger=0)
            context.term()


async def test_an_endpoint_that_leaves_is_forgotten(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=2, central=True) as c:
        (replica,) = c.replicas
        prompt = sample_prompt(40)
        await c.send(c.servers[1], prompt)
        await c.synced()
        central = replica.producer.central
        assert central is not None and "ns/pod1-rank-0" in central.streams
        for observer in replica.config.endpoint_observers:
            observer.endpoints_removed(["ns/pod1-rank-0"])
        assert "ns/pod1-rank-0" not in central.streams
        assert replica.producer.index.blocks("ns/pod1-rank-0") == 0
        unattributed = central.unattributed
        await c.send(c.servers[1], sample_prompt(41))
        await wait_until(lambda: central.unattributed > unattributed, timeout=10, message="its events now unattributed")


async def test_a_taken_address_is_retried_until_it_is_free(tokenizer_dir: Path) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    context = zmq.Context()
    squatter = context.socket(zmq.SUB)
    squatter.bind(endpoint)
    registry = PluginRegistry()
    register_in_tree(registry)
    config = load_config(precise_picker_config(tokenizer_dir, 0, central=endpoint), registry, PluginContext())
    producer = config.plugins["precise-prefix-cache-producer"]
    assert isinstance(producer, PrecisePrefixCacheProducer)
    try:
        producer.endpoints_added([])
        central = producer.central
        assert central is not None
        await wait_until(lambda: central.bind_failures >= 1, timeout=5, message="bind refused")
        assert not central.bound
        squatter.close(linger=0)
        await wait_until(lambda: central.bound, timeout=10, message="bound once the address was free")
    finally:
        squatter.close(linger=0)
        context.term()
        await producer.aclose()


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ({"zmqEndpoint": "indexer:5557"}, r"kvEventsConfig\.zmqEndpoint: 'indexer:5557' is not a ZMQ endpoint"),
        ({"discoverPods": False}, r"kvEventsConfig\.discoverPods: false needs a zmqEndpoint"),
    ],
)
def test_bad_central_settings_are_refused_naming_the_field(events: dict[str, object], message: str) -> None:
    registry = PluginRegistry()
    register_in_tree(registry)
    with pytest.raises(PluginConfigError, match=message):
        registry.create("precise-prefix-cache-producer", "p", {"kvEventsConfig": events}, PluginContext())
