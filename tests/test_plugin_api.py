"""The public plugin API is a promise: its names, its version rule, and who is held to it.

``epp.plugin_api.__all__`` is pinned here: removing or renaming a name is an incompatible change
(a new MAJOR version of the API), adding one a new MINOR version; either way this test must be
edited on purpose, beside ``API_VERSION``. The in-tree plugins are written against the same
objects (what the API exports are the framework's own classes), and the example distribution
imports nothing of epp but the API.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from epp import plugin_api
from epp.plugin_api import API_VERSION, PluginDefinition, api_version_compatible

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "zone-plugins"

PROMISED = {  # what each group is for, then its names
    "the version": "API_VERSION api_version_compatible",
    "plugin kinds (the contracts)": (
        "Admitter DataProducer FairnessPolicy Filter OrderingPolicy Parser Picker PostResponse PreRequest "
        "ProfileHandler ResponseComplete ResponseHeaderContributor SaturationDetector Scorer UsageLimitPolicy"
    ),
    "plugins and their definitions": (
        "AsyncClosable EndpointsObserver NamedPlugin Plugin PluginConfigError PluginContext PluginDefinition "
        "PluginFactory PluginKind PluginReferrer StatefulPlugin TypedName"
    ),
    "parameters": "Params parse_duration",
    "the request and its prompt": (
        "ApiKind ChatPrompt EMPTY_PROMPT InferenceRequest JsonPrompt ParsedBody Prompt TextPrompt TokenPrompt"
    ),
    "endpoints": "Endpoint EndpointHealth EndpointState Health MetricsSnapshot",
    "the scheduling cycle": "CycleState ProfileResult SchedulerProfileView SchedulingResult ScoredEndpoint",
    "admission, flow control and responses": "CompletedResponse Denial FlowView QueuedRequest Usage",
    "errors and time": "Clock EppError ErrorCode",
}

# What in-tree plugins import from epp that is not public, and why it stays private: the data
# layer's wiring (sources and extractors are not an out-of-tree kind yet), the links inside in-tree
# chains (precise prefix cache, topology, in-flight estimates), request attributes (being reworked
# by the data-producer declarations), wire names, the KV-event machinery, the utilization
# detector's configuration, the registry itself (epp.plugins registers the in-tree types).
INTERNAL = {
    "epp.framework.datalayer": "the data layer's source and extractor plugins",
    "epp.framework.engine_metrics": "the data layer's engine tables",
    "epp.framework.metric_spec": "the data layer's metric selectors",
    "epp.framework.producers.PrefixMatchInfo": "the precise prefix-cache chain",
    "epp.framework.data": "data declarations and scopes (issue 21), not public yet: declaring none reaches no data",
    "epp.framework.data_keys": "the well-known data keys the in-tree producers publish (with epp.framework.data)",
    "epp.framework.discovery": "endpoint discovery (file-discovery), a data-layer plugin: not an out-of-tree kind yet",
    "epp.framework.saturation.Aggregation": "utilization-detector's parameters",
    "epp.framework.saturation.Thresholds": "utilization-detector's parameters",
    "epp.framework.staleness": "utilization-detector's metricsStalenessThreshold, one definition with the picker's",
    "epp.framework.plugin.PluginRegistry": "epp.plugins registers the in-tree types",
    "epp.framework.topology": "the topology extractor and the topology filter and scorer",
    "epp.framework.scheduling.PEER_ENDPOINT": "the topology chain's peer, set by P/D profile handlers",
    "epp.framework.scheduling.InFlightEstimator": "inflight-load-producer, wired by the loader",
    "epp.framework.request.attribute_key": "request attributes, being reworked by the data-producer declarations",
    "epp.framework.headers": "the picker's wire header names",
    "epp.framework.disaggregation": "P/D stages, deciders and prefix matches (issue 25), in-tree only",
    "epp.framework.roles": "the llm-d.ai/role label's stages, shared by the role filters and stage-aware saturation",
    "epp.framework.http": "the picker's shared HTTP client (PluginContext.http, token-producer): new with issue 20",
    "epp.framework.measures": "what the prefix-cache and KV-event plugins report for upstream's /metrics series",
    "epp.tasks": "the picker's one owner of background tasks (the precise producer's KV-event subscribers)",
    "epp.kvevents": "the KV-event subscribers and index",
    "epp.labels": "label selectors (the precise producer's pod discovery)",
    "epp.framework.latency": "SLO-aware routing's predictions (the SLO plugins, prefix-cache-affinity-filter)",
    "epp.slo": "the latency predictor behind predicted-latency-producer",
    "epp.framework.latency_predictor": "a latency predictor's counts (LatencyPredicting): in-tree only so far",
    "epp.framework.replication": "state shared between replicas (--state-sync-address, issue 23): in-tree only so far",
    "epp.tokenize": "token-producer's local tokenizer threads and token cache",
    "epp.framework.request_header": "request-header processors (agent-identity): in-tree only so far",
}


def test_the_promised_names_are_exactly_the_public_ones() -> None:
    assert sorted(plugin_api.__all__) == sorted(
        name for names in PROMISED.values() for name in names.split()
    )  # a change here is an API version change: see above
    assert API_VERSION == "1.1.0"  # 1.1: PluginContext's pool_namespace, health and serving_processes
    undocumented = [
        f"{name}.{member}" if member else name
        for name in plugin_api.__all__
        if isinstance(cls := getattr(plugin_api, name), type)
        for member, value in [("", cls), *vars(cls).items()]
        if (member == "" or (callable(value) and not member.startswith("_") and getattr(cls, "_is_protocol", False)))
        and not value.__doc__
    ]
    assert undocumented == []  # every public class, and every method of a contract (protocol), says what it is for


@pytest.mark.parametrize(
    ("built_for", "compatible"),
    [("1.0", True), ("1.0.0", True), ("1.1", True), ("1.1.4", True), ("1.2", False), ("2.0", False), ("0.9", False)],
)
def test_a_plugin_runs_on_the_same_major_and_a_minor_no_newer(built_for: str, compatible: bool) -> None:
    assert api_version_compatible(built_for) is compatible


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"type_name": "Zone Filter"}, r"lower-case letters, digits, '-' and '\.', got 'Zone Filter'"),
        ({"type_name": ""}, r"got ''"),
        ({"api_version": "v1"}, r"MAJOR\.MINOR or MAJOR\.MINOR\.PATCH, got 'v1'"),
        ({"api_version": "1.0-beta"}, r"got '1\.0-beta'"),
        ({"factory": "create"}, r"factory must be callable, got 'create'"),
    ],
)
def test_a_definition_is_checked_when_it_is_made(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"type_name": "zone-filter", "factory": lambda n, p, c: None, "api_version": "1.0"}
    with pytest.raises(ValueError, match=message):
        PluginDefinition(**{**fields, **kwargs})  # type: ignore[arg-type]


def _imports(folder: Path) -> set[tuple[str, str]]:
    """(module, name) of every ``from epp... import name`` in ``folder``'s Python files."""
    found: set[tuple[str, str]] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "epp":
                found.update((node.module, alias.name) for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update((alias.name, "") for alias in node.names if alias.name.split(".")[0] == "epp")
    return found


def _imported(module: str, name: str) -> object:
    """What ``from module import name`` gives: an attribute, or a submodule (``from epp.framework import headers``)."""
    parent = importlib.import_module(module)
    return getattr(parent, name) if hasattr(parent, name) else importlib.import_module(f"{module}.{name}")


def test_in_tree_plugins_use_the_public_objects_where_there_are_any() -> None:
    public = {id(getattr(plugin_api, name)) for name in plugin_api.__all__}
    private: list[str] = []
    for module, name in sorted(_imports(ROOT / "epp" / "plugins")):
        if module.startswith("epp.plugins") or id(_imported(module, name)) in public:
            continue
        qualified = f"{module}.{name}"
        if not any(qualified == key or qualified.startswith(key + ".") for key in INTERNAL):
            private.append(qualified)
    assert private == [], (
        "in-tree plugins use framework names that are not in epp.plugin_api: make them public (a new minor API "
        "version) or list them in INTERNAL here with the reason they stay private"
    )


def test_the_example_distribution_imports_nothing_of_epp_but_the_api() -> None:
    used = _imports(EXAMPLE / "src")
    assert used and {module for module, _ in used} == {"epp.plugin_api"}
