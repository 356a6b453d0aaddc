"""Plugin types of installed distributions: found by entry point, imported only when named, refused clearly when broken.

Every distribution here is written to a directory of the test's own (``epp_sim.plugin_dists``): the
``dist-info`` metadata ``importlib.metadata`` reads and the plugin's modules, as ``pip install``
leaves them; discovery reads them from that directory only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

import pytest
import yaml

from epp.clock import ManualClock
from epp.config.installed_plugins import IN_TREE, PluginClashError, discover, listing
from epp.config.loader import ConfigError, LoadedConfig, load_config
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.plugins import register_in_tree
from epp.plugins.refused import REFUSED
from epp_sim.plugin_dists import write_distribution

HEADER = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "zone-plugins"

PLUGIN = """
from collections.abc import Mapping, Sequence
from typing import Any

from epp.plugin_api import (
    CycleState, EndpointState, InferenceRequest, NamedPlugin, Params, PluginContext, PluginDefinition, PluginKind,
)


class Constant(NamedPlugin):
    plugin_type = "{type}"
    kinds = frozenset({{PluginKind.SCORER}})

    def __init__(self, name: str, value: float) -> None:
        super().__init__(name)
        self.value = value

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        return [self.value] * len(candidates)


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> Constant:
    params = Params("{type}", parameters)
    value = params.number("value", 0.5, minimum=0.0, maximum=1.0)
    params.done()
    return Constant(name, value)


DEFINITION = PluginDefinition("{type}", create, api_version="{api}", experimental={experimental})
"""


def plugin_source(type_name: str, *, api: str = "1.0", experimental: bool = False) -> str:
    return PLUGIN.format(type=type_name, api=api, experimental=experimental)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` for the test's distributions; their modules are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", "") or "").startswith(str(tmp_path)):
            del sys.modules[name]


def install(site: Path, dist: str, type_name: str, **source: Any) -> None:
    """Distribution ``dist`` with one scorer type, in a module of its own (``plugin_source``'s options)."""
    module = type_name.replace("-", "_")
    write_distribution(
        site,
        dist,
        plugins={type_name: f"{module}:DEFINITION"},
        modules={f"{module}.py": plugin_source(source.pop("defines", type_name), **source)},
    )


def registry_for(site: Path) -> PluginRegistry:
    registry = PluginRegistry()
    register_in_tree(registry)
    discover(registry, distributions(path=[str(site)]))
    return registry


def load(text: str, registry: PluginRegistry, **kw: bool) -> LoadedConfig:
    return load_config(HEADER + text, registry, PluginContext(clock=ManualClock()), **kw)


def test_types_are_registered_by_name_and_imported_only_when_a_configuration_names_them(site: Path) -> None:
    write_distribution(
        site,
        "acme-plugins",
        plugins={"acme-scorer": "acme_scorer:DEFINITION", "acme-other": "acme_other:DEFINITION"},
        modules={"acme_scorer.py": plugin_source("acme-scorer"), "acme_other.py": plugin_source("acme-other")},
    )
    registry = registry_for(site)
    assert {"acme-scorer", "acme-other", "queue-scorer"} <= set(registry.types())
    assert "acme_scorer" not in sys.modules and "acme_other" not in sys.modules  # metadata only

    config = load("plugins: [{type: acme-scorer, parameters: {value: 0.25}}]\n", registry)
    scorer = config.plugins["acme-scorer"]
    assert type(scorer).__module__ == "acme_scorer" and scorer.value == 0.25  # type: ignore[attr-defined]
    assert [ws.scorer for ws in config.scheduler.profiles["default"].scorers] == [scorer]
    assert "acme_other" not in sys.modules  # never named, never imported


def test_a_name_clash_is_refused_naming_both_distributions(site: Path) -> None:
    write_distribution(site, "shadow", plugins={"queue-scorer": "shadow:DEFINITION"}, modules={})
    registry = PluginRegistry()
    register_in_tree(registry)
    with pytest.raises(PluginClashError) as err:
        discover(registry, distributions(path=[str(site)]))
    assert str(err.value).startswith(
        f"plugin type 'queue-scorer' of shadow 0.1.0 (shadow:DEFINITION) clashes with the in-tree type of {IN_TREE}"
    )

    other = site / "second"
    write_distribution(site / "first", "first-dist", plugins={"twin": "a:D"}, modules={})
    write_distribution(other, "second-dist", version="2.0", plugins={"twin": "b:D"}, modules={})
    registry = PluginRegistry()
    with pytest.raises(
        PluginClashError,
        match=r"two installed distributions, first-dist 0\.1\.0 \(a:D\) and "
        r"second-dist 2\.0 \(b:D\)",
    ):
        discover(registry, distributions(path=[str(site / "first"), str(other)]))


def test_an_installed_distribution_may_provide_an_upstream_type_this_picker_refuses(site: Path) -> None:
    refused = PluginRegistry()
    register_in_tree(refused)
    with pytest.raises(ConfigError, match="models-data-source is not supported by this picker"):
        load("plugins: [{type: models-data-source}]\n", refused)
    install(site, "models-dist", "models-data-source")
    registry = registry_for(site)
    assert registry.refusal("models-data-source") is None
    config = load("plugins: [{type: models-data-source, parameters: {value: 0.25}}]\n", registry)
    assert type(config.plugins["models-data-source"]).__module__ == "models_data_source"


@pytest.mark.parametrize(
    ("target", "source", "message"),
    [
        (
            "missing_mod:DEFINITION",
            None,
            r"cannot be imported: ModuleNotFoundError: No module named 'missing_mod'",
        ),
        ("syntax_err:DEFINITION", "def broken(:\n", r"cannot be imported: SyntaxError: "),
        ("raises_on_import:DEFINITION", "raise RuntimeError('no GPU here')\n", r"RuntimeError: no GPU here"),
        ("wrong_object:DEFINITION", "DEFINITION = 42\n", r"names a int, not an epp\.plugin_api\.PluginDefinition"),
        ("no_attr:MISSING", "X = 1\n", r"cannot be imported: AttributeError: "),
    ],
)
def test_a_plugin_that_cannot_be_loaded_refuses_the_configuration_naming_it(
    site: Path, target: str, source: str | None, message: str
) -> None:
    module = target.split(":")[0]
    write_distribution(
        site, "broken-dist", plugins={"broken-scorer": target}, modules={f"{module}.py": source} if source else {}
    )
    registry = registry_for(site)
    prefix = (
        r"plugins\[1\] \('broken-scorer', type 'broken-scorer'\): plugin type 'broken-scorer' of broken-dist 0\.1\.0 "
    )
    for _ in range(2):  # and again on the next load (a reload): the failure is not forgotten
        with pytest.raises(ConfigError, match=prefix + r"\(" + target + r"\) " + r".*" + message):
            load("plugins: [{type: queue-scorer}, {type: broken-scorer}]\n", registry)
    assert load("plugins: [{type: queue-scorer}]\n", registry).plugins.keys() == {
        "queue-scorer",
        "single-profile-handler",
        "max-score-picker",
        "utilization-detector",
        "openai-parser",
        "anthropic-parser",
        "vllmhttp-parser",
        "passthrough-parser",
        "metrics-data-source",
        "core-metrics-extractor",
    }  # a configuration without it still loads


@pytest.mark.parametrize(
    ("api", "loads"), [("1.0", True), ("1", None), ("1.1.7", True), ("1.2", False), ("2.0", False), ("0.9", False)]
)
def test_the_plugin_api_version_is_checked_at_load(site: Path, api: str, loads: bool | None) -> None:
    install(site, "versioned", "v-scorer", api=api)
    registry = registry_for(site)
    if loads:
        assert "v-scorer" in load("plugins: [{type: v-scorer}]\n", registry).plugins
    elif loads is None:  # not a version at all: the definition itself refuses to be built, on import
        with pytest.raises(
            ConfigError, match=r"ValueError: an API version is MAJOR\.MINOR or MAJOR\.MINOR\.PATCH, got '1'"
        ):
            load("plugins: [{type: v-scorer}]\n", registry)
    else:
        with pytest.raises(ConfigError) as err:
            load("plugins: [{type: v-scorer}]\n", registry)
        assert (
            f"plugin type 'v-scorer' of versioned 0.1.0 (v_scorer:DEFINITION) was built for epp plugin API {api}; "
            "this picker provides 1.1.0" in str(err.value)
        )


def test_experimental_plugins_need_the_flag(site: Path) -> None:
    install(site, "alpha", "alpha-scorer", experimental=True)
    registry = registry_for(site)
    with pytest.raises(ConfigError, match=r"experimental \(Alpha\) plugin; start the picker with --allow-experimental"):
        load("plugins: [{type: alpha-scorer}]\n", registry)
    assert (
        "alpha-scorer" in load("plugins: [{type: alpha-scorer}]\n", registry, allow_experimental_plugins=True).plugins
    )


FACTORIES = {
    "raises": "def create(name, parameters, context):\n    raise KeyError('zone')\n",
    "bad-param": (
        "from epp.plugin_api import Params\n"
        "def create(name, parameters, context):\n    Params('f', parameters).done()\n"
    ),
    "anonymous": "def create(name, parameters, context):\n    return object()\n",
    "misnamed": (
        "from epp.plugin_api import TypedName\n"
        "class P:\n    typed_name = TypedName('other', 'x')\n"
        "def create(name, parameters, context):\n    return P()\n"
    ),
    "kindless": (
        "from epp.plugin_api import NamedPlugin\n"
        "class P(NamedPlugin):\n    plugin_type = 'f-kindless'\n"
        "def create(name, parameters, context):\n    return P(name)\n"
    ),
}


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (
            "raises",
            r"\.parameters: the factory of plugin type 'f-raises' of f 0\.1\.0 \(f_raises:D\) failed: KeyError: 'zone'",
        ),
        ("bad-param", r"\.parameters: f\.parameters: unknown field\(s\) \['zone'\]"),
        ("anonymous", r"made an object whose typed_name is None, not f-anonymous/f-anonymous \(subclass NamedPlugin"),
        ("misnamed", r"typed_name is TypedName\(type='other', name='x'\), not f-misnamed/f-misnamed"),
        ("kindless", r"made a plugin that declares no kind"),
    ],
)
def test_a_factory_is_held_to_the_contract(site: Path, factory: str, message: str) -> None:
    type_name = f"f-{factory}"
    module = type_name.replace("-", "_")
    source = (
        FACTORIES[factory]
        + "from epp.plugin_api import PluginDefinition\n"
        + f"D = PluginDefinition({type_name!r}, create, api_version='1.0')\n"
    )
    write_distribution(site, "f", plugins={type_name: f"{module}:D"}, modules={f"{module}.py": source})
    with pytest.raises(ConfigError, match=message):
        load(f"plugins: [{{type: {type_name}, parameters: {{zone: a}}}}]\n", registry_for(site))


def test_the_entry_point_name_must_be_the_type_name(site: Path) -> None:
    install(site, "typo", "acme-scorr", defines="acme-scorer")
    with pytest.raises(
        ConfigError, match=r"names the definition of type 'acme-scorer': the entry point's name must be the type name"
    ):
        load("plugins: [{type: acme-scorr}]\n", registry_for(site))


def test_listing_says_where_each_type_comes_from_and_whether_it_loads(site: Path) -> None:
    write_distribution(
        site,
        "mixed",
        version="3.1",
        plugins={"ok-scorer": "ok_scorer:DEFINITION", "future-scorer": "future_scorer:DEFINITION"},
        modules={
            "ok_scorer.py": plugin_source("ok-scorer"),
            "future_scorer.py": plugin_source("future-scorer", api="2.0"),
        },
    )
    registry = PluginRegistry()
    register_in_tree(registry)
    rows = {r.type_name: r for r in listing(registry, discover(registry, distributions(path=[str(site)])))}
    assert rows["queue-scorer"].origin == IN_TREE and not rows["queue-scorer"].experimental
    assert rows["session-affinity-scorer"].experimental
    assert (rows["ok-scorer"].origin, rows["ok-scorer"].note) == ("mixed 3.1 (ok_scorer:DEFINITION)", "plugin API 1.0")
    assert rows["future-scorer"].note.startswith("refused: plugin type 'future-scorer' of mixed 3.1")


def test_serve_list_plugins_prints_them_and_a_clash_exits_1(site: Path) -> None:
    install(site, "listed", "listed-scorer")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-m", "epp", "serve", "--list-plugins"], env=env, capture_output=True, text=True, check=True
    ).stdout
    lines = out.splitlines()
    assert lines[0].split() == ["TYPE", "STABILITY", "FROM"]
    assert any(line.split()[:4] == ["queue-scorer", "stable", "epp", "0.1.0"] for line in lines)
    name, reason = sorted(REFUSED.items())[0]  # an upstream type known only to be refused says why
    (refused,) = [line for line in lines if line.startswith(f"{name} ")]
    assert refused.endswith(f"(in-tree): refused: {reason}")
    (listed,) = [line for line in lines if line.startswith("listed-scorer ")]
    assert listed.split(None, 2)[1:] == ["stable", "listed 0.1.0 (listed_scorer:DEFINITION): plugin API 1.0"]

    write_distribution(site, "shadow", plugins={"queue-scorer": "shadow:DEFINITION"}, modules={})
    clash = subprocess.run(
        [sys.executable, "-m", "epp", "serve", "--list-plugins"], env=env, capture_output=True, text=True
    )
    assert clash.returncode == 1 and "clashes with the in-tree type" in clash.stderr


def serve(site: Path, config: str) -> subprocess.CompletedProcess[str]:
    """``epp serve`` with ``site`` on its path, until it fails to start (it needs no cluster to get that far)."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    args = ["serve", "--pool-name", "p", "--config-text", HEADER + config, "--zap-encoder", "json"]
    return subprocess.run([sys.executable, "-m", "epp", *args], env=env, capture_output=True, text=True, timeout=60)


def test_serve_refuses_to_start_with_a_clash_or_a_broken_plugin_it_names(site: Path) -> None:
    write_distribution(site, "no-module", plugins={"ghost-scorer": "ghost:DEFINITION"}, modules={})
    broken = serve(site, "plugins: [{type: ghost-scorer}]\n")
    assert broken.returncode == 1
    assert (
        "plugins[0] ('ghost-scorer', type 'ghost-scorer'): plugin type 'ghost-scorer' of no-module 0.1.0 "
        "(ghost:DEFINITION) cannot be imported: ModuleNotFoundError: No module named 'ghost'"
    ) in broken.stderr

    write_distribution(site, "shadow", plugins={"queue-scorer": "shadow:DEFINITION"}, modules={})
    clash = serve(site, "plugins: [{type: queue-scorer}]\n")
    assert clash.returncode == 1
    assert (
        "plugin type 'queue-scorer' of shadow 0.1.0 (shadow:DEFINITION) clashes with the in-tree type" in clash.stderr
    )


def test_the_example_configmap_loads_with_the_example_distribution(site: Path) -> None:
    write_distribution(
        site,
        "epp-zone-example",
        plugins={
            "zone-affinity-filter": "epp_zone_example:ZONE_AFFINITY_FILTER",
            "custom-metric-scorer": "epp_zone_example:CUSTOM_METRIC_SCORER",
        },
        modules={"epp_zone_example.py": (EXAMPLE / "src" / "epp_zone_example.py").read_text()},
    )
    configmap = yaml.safe_load((EXAMPLE / "deploy" / "configmap.yaml").read_text())
    text = configmap["data"]["epp-config.yaml"]
    config = load_config(text, registry_for(site), PluginContext(clock=ManualClock()))
    (profile,) = config.scheduler.profiles.values()
    assert [type(f).__name__ for f in profile.filters] == ["ZoneAffinityFilter"]
    assert [(type(s.scorer).__name__, s.weight) for s in profile.scorers] == [
        ("CustomMetricScorer", 2.0),
        ("QueueScorer", 1.0),
    ]
