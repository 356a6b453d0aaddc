"""Precise prefix routing end to end: simulated vLLM pods publish KV events over real ZMQ, the
picker's plugin chain (token-producer → precise-prefix-cache-producer → prefix-cache-scorer)
subscribes and schedules. The chain has no approximate index (nothing reads one, so the loader adds
none): only the events can explain each decision.
"""

from __future__ import annotations

import random
from pathlib import Path

from precise_cluster import cluster, sample_prompt

from epp_sim.modelserver import ModelServer
from epp_sim.precise_prefix import CHAIN
from epp_sim.waits import wait_until


async def test_announced_prefix_is_routed_to_its_pod_and_eviction_moves_it(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, num_blocks=96) as c:
        (replica,) = c.replicas
        prompt = sample_prompt(1)
        ids = await c.tokens(c.servers[1], prompt)
        assert len(ids) >= 64  # several blocks
        await c.send(c.servers[1], prompt)
        await c.synced()
        assert replica.matched(ids, "127.0.0.3")
        # No approximate index in this configuration: the events alone send the follow-up to pod 1.
        assert "approx-prefix-cache-producer" not in replica.config.plugins
        assert await replica.pick(prompt + " and a new question") == "127.0.0.3"

        # Pod 1 evicts it (other prompts fill its 96 blocks); pod 2 now holds it.
        for seed in range(100, 112):
            await c.send(c.servers[1], sample_prompt(seed))
        await c.synced()
        assert not replica.matched(ids, "127.0.0.3")
        await c.send(c.servers[2], prompt)
        await c.synced()
        assert await replica.pick(prompt + " and a new question") == "127.0.0.4"


async def test_publisher_restart_clears_the_pod_and_new_events_route_again(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=2) as c:
        (replica,) = c.replicas
        prompt = sample_prompt(2)
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
                await c.send(restarted, f"after restart {n} " + sample_prompt(500 + n, 30))
                # Seen as the connection dropping (or, had it missed nothing, seq going backwards).
                return subscriber.counts.disconnects + subscriber.counts.restarts >= 1 and replica.synced(c.servers)

            await wait_until(restart_seen, timeout=15, interval=0.05, message="restart detected")
            # The new process holds nothing it was not sent: the old entries are gone.
            assert not replica.matched(ids, "127.0.0.2")
            fresh = sample_prompt(3)
            await c.send(restarted, fresh)
            await c.synced()
            assert await replica.pick(fresh + " more") == "127.0.0.2"
        finally:
            await restarted.stop()


async def test_a_dropped_message_clears_the_pod_without_replay(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=2) as c:
        (replica,) = c.replicas
        kept, lost = sample_prompt(4), sample_prompt(5)
        kept_ids, lost_ids = await c.tokens(c.servers[0], kept), await c.tokens(c.servers[0], lost)
        await c.send(c.servers[0], kept)
        await c.synced()
        assert replica.matched(kept_ids, "127.0.0.2")
        publisher = c.servers[0].kv_events
        subscriber = replica.producer.subscribers["ns/pod0-rank-0"]
        assert publisher is not None
        sent_before, received_before = publisher.seq, subscriber.counts.messages
        await c.lose_one(c.servers[0], lost, sample_prompt(6))  # the message announcing `lost` never arrives
        assert subscriber.counts.gaps == 1
        # Entries from before the gap are unknown now: not kept silently.
        assert not replica.matched(kept_ids, "127.0.0.2")
        assert not replica.matched(lost_ids, "127.0.0.2")
        # ... and /metrics says so, for that endpoint only.
        assert replica.scrape("epp_kv_events_gaps_total") == 1
        assert replica.scrape("epp_kv_events_gaps_total", "ns/pod1-rank-0") == 0
        assert replica.scrape("epp_kv_events_replays_total") == 0
        received = replica.scrape("llm_d_epp_kv_cache_events_messages_received_total")
        assert received == subscriber.counts.messages
        # Since the drop, all but the dropped one (a warm-up message sent before the subscription
        # reached the publisher may be lost to it, as with vLLM, so the count is taken from here).
        assert subscriber.counts.messages - received_before == publisher.seq - sent_before - 1
        blocks = replica.producer.index.blocks("ns/pod0-rank-0")
        assert blocks > 0 and replica.scrape("epp_kv_events_index_blocks") == blocks  # only what came after


async def test_an_undecodable_message_counts_as_a_decode_error_and_clears_the_pod(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=2) as c:
        (replica,) = c.replicas
        kept = sample_prompt(9)
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
        lost = sample_prompt(7)
        lost_ids = await c.tokens(c.servers[0], lost)
        publisher = c.servers[0].kv_events
        assert publisher is not None
        publisher.drop_next = 1
        await c.send(c.servers[0], lost)
        await c.send(c.servers[0], sample_prompt(8))
        await c.synced()
        subscriber = replica.producer.subscribers["ns/pod0-rank-0"]
        assert (subscriber.counts.gaps, subscriber.counts.replays) == (1, 1)
        assert (replica.scrape("epp_kv_events_gaps_total"), replica.scrape("epp_kv_events_replays_total")) == (1, 1)
        assert replica.matched(lost_ids, "127.0.0.2")
        assert await replica.pick(lost + " follow-up") == "127.0.0.2"


async def test_two_replicas_agree_on_100_of_100_prompts(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=3, replicas=(CHAIN, CHAIN), num_blocks=4096) as c:
        rng = random.Random(42)
        prompts: list[tuple[str, str]] = []
        for i in range(100):
            server = c.servers[rng.randrange(3)]
            prompt = f"conversation {i}: " + sample_prompt(1000 + i, 60)
            await c.send(server, prompt)
            prompts.append((prompt, server.host))
        await c.synced()
        first, second = c.replicas
        picks = [(await first.pick(p + " next turn"), await second.pick(p + " next turn")) for p, _ in prompts]
        assert sum(a == b for a, b in picks) == 100
        assert [a for a, _ in picks] == [holder for _, holder in prompts]
