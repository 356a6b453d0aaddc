"""precise-prefix-cache-scorer, llm-d's deprecated all-in-one form: its parameters are the producer's
(errors name its own fields), the loader reports it as deprecated naming the chain, and with real
simulated pods publishing KV events it routes and scores exactly as the chain does."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from precise_cluster import cluster, sample_prompt

from epp.api.views import by_plugin_name
from epp.config.loader import load_config
from epp.framework.plugin import PluginConfigError, PluginContext, PluginRegistry
from epp.framework.scheduling import CycleState
from epp.plugins import prefix_cache_scorer, register_in_tree
from epp.plugins.precise_prefix_scorer import PrecisePrefixCacheScorer, create
from epp.requestcontrol.plugin_series import Readings
from epp_sim.precise_prefix import ALL_IN_ONE, CHAIN, SCORER, precise_picker_config


def _create(params: dict[str, Any]) -> PrecisePrefixCacheScorer:
    return create("precise-prefix-cache-scorer", params, PluginContext())


def test_upstream_parameters_build_its_producer() -> None:
    plugin = _create(
        {
            "tokenProcessorConfig": {"blockSizeTokens": 64, "hashSeed": "42"},
            "indexerConfig": {"kvBlockIndexConfig": {"enableMetrics": False, "inMemoryConfig": {"size": 1000}}},
            "kvEventsConfig": {
                "topicFilter": "kv@",
                "podDiscoveryConfig": {"podLabelSelector": "app=vllm", "socketPort": 6000, "replaySocketPort": 6001},
            },
            "speculativeIndexing": True,
            "speculativeTTL": "500ms",
        }
    )
    producer = plugin.producer
    assert (producer.block_size_tokens, producer.hash_seed) == (64, "42")
    assert (producer.socket_port, producer.replay_port, producer.speculative_ttl) == (6000, 6001, 0.5)
    assert producer.pod_selector.matches({"app": "vllm"}) and not producer.pod_selector.matches({})
    assert producer.typed_name.name == plugin.scorer.typed_name.name == "precise-prefix-cache-scorer"
    assert plugin.scorer.key == producer.key  # the scorer part reads what the producer part publishes
    defaults = _create({}).producer
    assert (defaults.block_size_tokens, defaults.socket_port, defaults.speculative_ttl) == (16, 5557, None)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"blockSize": 64}, r"precise-prefix-cache-scorer\.parameters: unknown field\(s\) \['blockSize'\]"),
        (
            {"tokenProcessorConfig": {"blockSizeTokens": 0}},
            r"precise-prefix-cache-scorer\.parameters\.tokenProcessorConfig\.blockSizeTokens: must be >= 1",
        ),
        (
            {"tokenProcessorConfig": {"hashAlgorithm": "cbor-fnv"}},
            r"precise-prefix-cache-scorer\.parameters\.tokenProcessorConfig\.hashAlgorithm: 'cbor-fnv'",
        ),
        (
            {"indexerConfig": {"tokenizersPoolConfig": {"modelName": "m"}}},
            r"precise-prefix-cache-scorer\.parameters\.indexerConfig\.tokenizersPoolConfig: .*token-producer",
        ),
        (
            {"kvEventsConfig": {"zmqEndpoint": "http://indexer:5557"}},
            r"precise-prefix-cache-scorer\.parameters\.kvEventsConfig\.zmqEndpoint: 'http://indexer:5557' is not a ZMQ",
        ),
        (
            {"kvEventsConfig": {"discoverPods": False}},
            r"precise-prefix-cache-scorer\.parameters\.kvEventsConfig\.discoverPods: false needs a zmqEndpoint",
        ),
        (
            {"kvEventsConfig": {"podDiscoveryConfig": {"socketPort": "5557"}}},
            r"precise-prefix-cache-scorer\.parameters\.kvEventsConfig\.podDiscoveryConfig\.socketPort: "
            "must be an integer",
        ),
        (
            {"kvEventsConfig": {"podDiscoveryConfig": {"podLabelSelector": "a in"}}},
            r"precise-prefix-cache-scorer\.parameters\.kvEventsConfig\.podDiscoveryConfig: ",
        ),
        ({"speculativeTTL": "soon"}, r"precise-prefix-cache-scorer\.parameters\.speculativeTTL"),
    ],
)
def test_bad_parameters_are_refused_naming_its_field(params: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginConfigError, match=message):
        _create(params)


def test_the_loader_reports_it_deprecated_naming_the_chain(tokenizer_dir: Path) -> None:
    registry = PluginRegistry()
    register_in_tree(registry)
    loaded = load_config(precise_picker_config(tokenizer_dir, 5557, form=ALL_IN_ONE), registry, PluginContext())
    (notice,) = [n for n in loaded.notices if n.deprecated and n.setting.startswith("plugins")]
    assert notice.setting == "plugins[2].type"
    assert "precise-prefix-cache-producer + prefix-cache-scorer with prefixMatchInfoProducerName" in notice.detail
    chain = load_config(precise_picker_config(tokenizer_dir, 5557, form=CHAIN), registry, PluginContext())
    assert [n.setting for n in chain.notices if n.deprecated] == ["apiVersion"]  # the test config is in GIE's group
    # Its parameters are the producer's, so the producer's notices apply to it too.
    text = precise_picker_config(tokenizer_dir, 5557, form=ALL_IN_ONE).replace(
        "    kvEventsConfig:", "    indexerConfig: {kvBlockIndexConfig: {enableMetrics: true}}\n    kvEventsConfig:"
    )
    settings = {n.setting for n in load_config(text, registry, PluginContext()).notices}
    assert "indexerConfig.kvBlockIndexConfig.enableMetrics" in settings
    # Neither form has an approximate index (nothing reads one, so the loader adds no
    # approx-prefix-cache-producer): the only index is the KV-block one, under the all-in-one's name.
    sizes = Readings.of(loaded.measured).index_sizes
    assert sizes == {("precise-prefix-cache-scorer", "precise-prefix-cache-producer"): 0}
    assert by_plugin_name(sizes) == {"precise-prefix-cache-scorer": 0}
    assert by_plugin_name(Readings.of(chain.measured).index_sizes) == {"precise-prefix-cache-producer": 0}


async def test_it_routes_and_scores_as_the_chain_does(tokenizer_dir: Path) -> None:
    async with cluster(tokenizer_dir, pods=3, replicas=(CHAIN, ALL_IN_ONE), num_blocks=1024) as c:
        chain, all_in_one = c.replicas
        rng = random.Random(7)
        prompts: list[tuple[str, str]] = []
        for i in range(20):
            server = c.servers[rng.randrange(3)]
            prompt = f"ticket {i}: " + sample_prompt(2000 + i, 60)
            await c.send(server, prompt)
            prompts.append((prompt, server.host))
        await c.synced()
        plugin = all_in_one.config.plugins[SCORER[ALL_IN_ONE]]
        assert isinstance(plugin, PrecisePrefixCacheScorer)
        for prompt, holder in prompts:
            follow_up = prompt + " next turn"
            scores = []
            for replica, form in ((chain, CHAIN), (all_in_one, ALL_IN_ONE)):
                scorer: Any = replica.config.plugins[SCORER[form]]
                scores.append(scorer.score(CycleState(), await replica.request(follow_up), replica.candidates))
            assert scores[0] == scores[1] and max(scores[1]) > 0
            assert (await chain.pick(follow_up), await all_in_one.pick(follow_up)) == (holder, holder)


def test_another_prefix_cache_scorer_may_read_its_match_info() -> None:
    """As upstream, it publishes match info under its own name."""
    plugin = _create({})
    reader = prefix_cache_scorer.create(
        "reader", {"prefixMatchInfoProducerName": "precise-prefix-cache-scorer"}, PluginContext()
    )
    assert set(reader.consumes().required) <= set(plugin.produces())
