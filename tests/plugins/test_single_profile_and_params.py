"""single-profile-handler, the in-tree registration list and the parameter helper."""

from __future__ import annotations

import pytest
from scheduling_builders import request, state

from epp.framework.datalayer import MetricsSource
from epp.framework.params import Params, parse_duration
from epp.framework.plugin import PluginConfigError, PluginContext, PluginRegistry
from epp.framework.scheduling import CycleState, ProfileHandler, ProfileResult
from epp.plugins import register_in_tree, single_profile


class _View:
    def __init__(self, name: str) -> None:
        self.name = name


def test_single_profile_handler_runs_once_and_names_primary() -> None:
    handler = single_profile.create("h", {}, PluginContext())
    assert isinstance(handler, ProfileHandler)
    profiles = {"only": _View("only")}
    assert handler.pick_profiles(CycleState(), request(), profiles, {}) == ["only"]
    result = ProfileResult([state(0)])
    assert handler.pick_profiles(CycleState(), request(), profiles, {"only": result}) == []
    processed = handler.process_results(CycleState(), request(), {"only": result})
    assert processed.primary_profile == "only" and processed.primary is result


UPSTREAM_TYPES = (
    "queue-scorer",
    "kv-cache-utilization-scorer",
    "lora-affinity-scorer",
    "prefix-cache-scorer",
    "session-affinity-scorer",
    "max-score-picker",
    "random-picker",
    "weighted-random-picker",
    "single-profile-handler",
    "utilization-detector",
    "legacy-filter-tree",
    "metrics-data-source",
    "core-metrics-extractor",
    "openai-parser",
)
"""Plugin type names as upstream configurations spell them."""


@pytest.mark.parametrize("plugin_type", UPSTREAM_TYPES)
def test_each_upstream_type_name_builds_a_plugin_of_that_type(plugin_type: str) -> None:
    registry = PluginRegistry()
    register_in_tree(registry)
    plugin = registry.create(plugin_type, f"my-{plugin_type}", {}, PluginContext())
    assert plugin.typed_name.type == plugin_type
    assert plugin.typed_name.name == f"my-{plugin_type}"


def test_a_data_source_reads_its_parameters() -> None:
    registry = PluginRegistry()
    register_in_tree(registry)
    source = registry.create("metrics-data-source", "src", {"path": "/metrics"}, PluginContext())
    assert isinstance(source, MetricsSource) and source.source.path == "/metrics"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("200ms", 0.2), ("1.5s", 1.5), ("1m30s", 90.0), ("100us", 1e-4), ("2h", 7200.0), ("0", 0.0), ("-1s", -1.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1x", "ms", "1s2"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_params_reject_non_mapping_and_bools() -> None:
    with pytest.raises(PluginConfigError, match=r"t\.parameters: must be a mapping"):
        Params("t", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(PluginConfigError, match=r"t\.parameters\.n: must be an integer, got True"):
        Params("t", {"n": True}).integer("n", 1)
    with pytest.raises(PluginConfigError, match=r"t\.parameters\.x: must be a number, got 'nan'"):
        Params("t", {"x": "nan"}).number("x", 1.0)
