"""Data declarations at load: missing producers added (transitively) or refused naming both ends, the
producers ordered, types and layers checked; and at run time a plugin reaches only what it declared."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from scheduling_builders import parsed, state

from epp.config.data_scope_series import DataScopeViolations
from epp.config.loader import ConfigError, LoadedConfig, load_config
from epp.framework.data import NO_DATA, Consuming, DataKey, DataScope, DataScopeError, Dependencies, Producing
from epp.framework.data_keys import PREFIX_CACHE_MATCH_INFO, SESSION_ID, TOKENIZED_PROMPT, TokenizedPrompt
from epp.framework.endpoint import EndpointState
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind, PluginRegistry
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins import register_in_tree
from epp.telemetry.metrics import EppMetrics

HEADER = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
SECRET = DataKey("Secret", "secret-producer")
"""A key only the test plugins below know."""


class _Scored(NamedPlugin):
    """A scorer reading what its parameters say, declaring what its parameters say."""

    plugin_type = "test-scorer"
    kinds = frozenset({PluginKind.SCORER})

    def __init__(self, name: str, declared: Sequence[DataKey], reads: DataKey, produced: Sequence[DataKey]) -> None:
        super().__init__(name)
        self.declared, self.reads, self.produced = declared, reads, produced
        self.scope = NO_DATA

    def consumes(self) -> Dependencies:
        return Dependencies(required={k: str for k in self.declared})

    def produces(self) -> Mapping[DataKey, type]:
        return {k: str for k in self.produced}

    def bind_data_scope(self, scope: DataScope) -> None:
        self.scope = scope

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        return [1.0 if self.scope.get(request, self.reads) else 0.0 for _ in candidates]


class _Producer(NamedPlugin):
    """A data producer writing ``writes`` (whether or not it declared it), reading its declared inputs."""

    plugin_type = "test-producer"
    kinds = frozenset({PluginKind.DATA_PRODUCER})

    def __init__(self, name: str, produced: Sequence[DataKey], writes: DataKey, needs: Sequence[DataKey]) -> None:
        super().__init__(name)
        self.produced, self.writes, self.needs = produced, writes, needs
        self.scope = NO_DATA

    def produces(self) -> Mapping[DataKey, type]:
        return {k: str for k in self.produced}

    def consumes(self) -> Dependencies:
        return Dependencies(required={k: str for k in self.needs})

    def bind_data_scope(self, scope: DataScope) -> None:
        self.scope = scope

    async def produce(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> None:
        self.scope.put(request, self.writes, "value")


def _keys(params: Mapping[str, Any], field: str) -> list[DataKey]:
    return [DataKey(*k.split("/")) for k in params.get(field, [])]


def _registry() -> PluginRegistry:
    registry = PluginRegistry()
    register_in_tree(registry)
    registry.register(
        "test-scorer",
        lambda name, p, c: _Scored(
            name, _keys(p, "declares"), DataKey(*p.get("reads", "Secret/secret-producer").split("/")), _keys(p, "makes")
        ),
    )
    registry.register(
        "test-producer",
        lambda name, p, c: _Producer(
            name, _keys(p, "makes"), DataKey(*p.get("writes", "Secret/secret-producer").split("/")), _keys(p, "needs")
        ),
    )
    return registry


def _load(text: str, registry: PluginRegistry | None = None) -> LoadedConfig:
    return load_config(HEADER + text, registry or _registry(), PluginContext())


def _types(loaded: LoadedConfig) -> dict[str, str]:
    return {name: p.typed_name.type for name, p in loaded.plugins.items()}


def test_a_scorer_of_prefix_matches_gets_the_approximate_producer_and_it_a_token_producer() -> None:
    """The llm-d router's well-lit-path "optimized-baseline": both producers are added, tokens first."""
    loaded = _load("plugins:\n- type: queue-scorer\n- type: prefix-cache-scorer\n")
    types = _types(loaded)
    assert types["approx-prefix-cache-producer"] == "approx-prefix-cache-producer"
    assert types["token-producer"] == "token-producer"
    assert [p.typed_name.name for p in loaded.data_producers] == ["token-producer", "approx-prefix-cache-producer"]
    # The effective configuration shows them, as upstream's handle does.
    assert {"approx-prefix-cache-producer", "token-producer"} <= {p.name for p in loaded.config.plugins}


@pytest.mark.parametrize(
    ("plugin", "added"),
    [
        ("no-hit-lru-scorer", ["token-producer", "approx-prefix-cache-producer"]),
        ("prefix-cache-affinity-filter", ["token-producer", "approx-prefix-cache-producer"]),
        ("context-length-aware", ["token-producer"]),
    ],
)
def test_the_llmd_readers_get_their_default_producers(plugin: str, added: list[str]) -> None:
    """Each alone in a configuration loads, its producers added; and reads what they publish."""
    loaded = _load(
        f"plugins:\n- type: {plugin}\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: {plugin}\n"
    )
    assert [p.typed_name.name for p in loaded.data_producers] == added
    reader, producer = loaded.plugins[plugin], loaded.plugins[added[-1]]
    assert isinstance(reader, Consuming) and isinstance(producer, Producing)
    (key,) = reader.consumes().required
    assert key in producer.produces()


def test_a_declared_producer_is_used_and_only_the_unserved_reader_gets_a_default() -> None:
    """The well-lit-path "tiered-prefix-cache-cpu": one scorer reads a named producer, the other the default."""
    loaded = _load(
        """plugins:
- type: token-producer
- type: approx-prefix-cache-producer
  name: cpu-prefix-cache-producer
  parameters: {autoTune: false, lruCapacityPerServer: 1000}
- type: prefix-cache-scorer
  name: gpu-prefix-cache-scorer
- type: prefix-cache-scorer
  name: cpu-prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: cpu-prefix-cache-producer}
"""
    )
    producers = [(p.typed_name.name, p.typed_name.type) for p in loaded.data_producers]
    assert producers == [
        ("token-producer", "token-producer"),
        ("cpu-prefix-cache-producer", "approx-prefix-cache-producer"),
        ("approx-prefix-cache-producer", "approx-prefix-cache-producer"),
    ]


def test_producers_run_after_what_they_read_whatever_the_order_of_the_file() -> None:
    loaded = _load(
        """plugins:
- {type: test-producer, name: second, parameters: {makes: [B/second], writes: B/second, needs: [A/first]}}
- {type: test-producer, name: first, parameters: {makes: [A/first], writes: A/first}}
- type: queue-scorer
"""
    )
    assert [p.typed_name.name for p in loaded.data_producers] == ["first", "second"]


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        (
            "- {type: prefix-cache-scorer, parameters: {prefixMatchInfoProducerName: missing}}\n",
            r"plugin 'prefix-cache-scorer' \(type 'prefix-cache-scorer'\) reads PrefixCacheMatchInfoDataKey/missing, "
            "which no plugin produces: declare its producer, a plugin named 'missing'",
        ),
        (
            "- type: queue-scorer\n"
            "- {type: prefix-cache-scorer, parameters: {prefixMatchInfoProducerName: queue-scorer}}\n",
            r"reads PrefixCacheMatchInfoDataKey/queue-scorer, and plugin 'queue-scorer' \(type 'queue-scorer'\) "
            "does not produce it",
        ),
        (  # the default producer's name is taken
            "- {type: queue-scorer, name: approx-prefix-cache-producer}\n- type: prefix-cache-scorer\n",
            "reads PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer, and plugin "
            r"'approx-prefix-cache-producer' \(type 'queue-scorer'\) does not produce it",
        ),
        (  # a default producer that needs parameters (upstream's session-id-producer)
            "- {type: test-scorer, parameters: {declares: [SessionIDDataKey/session-id-producer]}}\n",
            r"plugin 'test-scorer' \(type 'test-scorer'\) reads SessionIDDataKey/session-id-producer; its default "
            "producer 'session-id-producer' cannot be added: .*set exactly one of headerName and cookieName",
        ),
        (
            "- {type: test-producer, name: a, parameters: {makes: [A/a], writes: A/a, needs: [B/b]}}\n"
            "- {type: test-producer, name: b, parameters: {makes: [B/b], writes: B/b, needs: [A/a]}}\n",
            r"the data dependencies of \['a', 'b'\] form a cycle",
        ),
        (  # a scorer (scheduling) cannot feed a data producer (request control, which runs before it)
            "- {type: test-scorer, name: late, parameters: {makes: [A/late], declares: []}}\n"
            "- {type: test-producer, name: early, parameters: {makes: [B/early], writes: B/early, needs: [A/late]}}\n",
            "plugin 'late' .* produces A/late in the scheduling layer, after plugin 'early' .* reads it in the "
            "request control layer",
        ),
        (
            "- type: token-producer\n- {type: test-scorer, parameters: {declares: [TokenizedPrompt/token-producer]}}\n",
            "reads TokenizedPrompt/token-producer as str, but plugin 'token-producer' .* produces TokenizedPrompt",
        ),
    ],
)
def test_a_configuration_whose_data_cannot_be_produced_is_refused_naming_both(plugins: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load("plugins:\n" + plugins)


async def test_at_run_time_a_plugin_reaches_only_what_it_declared(caplog: pytest.LogCaptureFixture) -> None:
    loaded = _load(
        """plugins:
- {type: test-producer, name: secret-producer, parameters: {makes: [Secret/secret-producer]}}
- {type: test-scorer, name: honest, parameters: {declares: [Secret/secret-producer]}}
- {type: test-scorer, name: nosy, parameters: {declares: []}}
- {type: test-producer, name: forger, parameters: {makes: [Other/forger], writes: Secret/secret-producer}}
"""
    )
    metrics = EppMetrics()
    metrics.series(DataScopeViolations).watch(loaded.data_scopes)
    request = parsed("/v1/completions", {"model": "m", "prompt": "p"})
    candidates = [state("a")]
    producers = {p.typed_name.name: p for p in loaded.data_producers}
    await producers["secret-producer"].produce(request, candidates)
    with pytest.raises(DataScopeError, match="'Secret/secret-producer'"):
        await producers["forger"].produce(request, candidates)  # dropped: the value is still the producer's
    honest, nosy = loaded.plugins["honest"], loaded.plugins["nosy"]
    assert isinstance(honest, _Scored) and isinstance(nosy, _Scored)
    assert honest.score(CycleState(), request, candidates) == [1.0]
    for _ in range(3):
        assert nosy.score(CycleState(), request, candidates) == [0.0]  # resolves as absent
    assert request.attributes[SECRET.id] == "value"

    def violations(name: str, type_name: str, kinds: str, access: str) -> float | None:
        labels = {"extension_point": kinds, "plugin_type": type_name, "plugin_name": name, "access": access}
        return metrics.registry.get_sample_value("llm_d_epp_plugin_data_scope_violations_total", labels)

    assert violations("nosy", "test-scorer", "Scorer", "read") == 3
    assert violations("forger", "test-producer", "PrepareData", "write") == 1
    assert violations("honest", "test-scorer", "Scorer", "read") is None
    logged = [r for r in caplog.records if r.getMessage().startswith("rejected data access")]
    assert [(r.plugin, r.access) for r in logged] == [  # type: ignore[attr-defined]
        ("forger/test-producer", "write"),
        ("nosy/test-scorer", "read"),  # once, not once per read
    ]


def test_the_well_known_keys_are_upstreams() -> None:
    assert TOKENIZED_PROMPT.id == "TokenizedPrompt/token-producer"
    assert PREFIX_CACHE_MATCH_INFO.id == "PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer"
    assert SESSION_ID.named("sid").id == "SessionIDDataKey/sid"
    assert SESSION_ID.named("") is SESSION_ID
    assert TokenizedPrompt.__name__ == "TokenizedPrompt"
