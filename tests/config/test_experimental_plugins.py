"""``--allow-experimental-plugins``: types upstream marks Alpha load only with the flag, as upstream.

The llm-d router registers each plugin type with a stability level and refuses a configuration
naming an Alpha one unless the flag is set (``ValidatePluginStability``). Our in-tree types that
are Alpha there (``cmd/epp/runner/runner.go``) are experimental here; any registered type can be
marked the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from serve_process import run_serve

from epp.config.loader import ConfigError, load_config
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind, PluginRegistry
from epp.plugins import register_in_tree

ROOT = Path(__file__).resolve().parents[2]

SESSION = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- name: sticky
  type: session-affinity-scorer
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer}
  - {pluginRef: sticky}
"""


def _registry() -> PluginRegistry:
    registry = PluginRegistry()
    register_in_tree(registry)
    return registry


def test_the_in_tree_types_upstream_marks_alpha_are_the_experimental_ones() -> None:
    registry = _registry()
    upstream = yaml.safe_load((ROOT / "tests" / "upstream_configs" / "registry.yaml").read_text())["types"]
    alpha = {t["type"] for t in upstream if t["stability"] == "Alpha"}
    working = {t for t in registry.types() if registry.refusal(t) is None}
    assert {t for t in registry.types() if registry.is_experimental(t)} == alpha & working
    assert "session-affinity-scorer" in alpha & working  # the check has something to check


def test_an_experimental_plugin_needs_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"plugins\[1\] \('sticky', type 'session-affinity-scorer'\).*"):
        load_config(SESSION, _registry(), PluginContext())
    with pytest.raises(ConfigError, match="--allow-experimental-plugins"):
        load_config(SESSION, _registry(), PluginContext())
    loaded = load_config(SESSION, _registry(), PluginContext(), allow_experimental_plugins=True)
    assert loaded.plugins["sticky"].typed_name.type == "session-affinity-scorer"


class _Fancy(NamedPlugin):
    plugin_type = "fancy-scorer"
    kinds = frozenset({PluginKind.SCORER})

    def score(self, cycle: Any, request: Any, candidates: Any) -> list[float]:
        return [0.0 for _ in candidates]


def _fancy(name: str, parameters: Mapping[str, Any], context: PluginContext) -> _Fancy:
    return _Fancy(name)


def test_any_registered_type_can_declare_itself_experimental() -> None:
    registry = _registry()
    registry.register("fancy-scorer", _fancy, experimental=True)
    text = SESSION.replace("session-affinity-scorer", "fancy-scorer")
    with pytest.raises(ConfigError, match="experimental"):
        load_config(text, registry, PluginContext())
    assert load_config(text, registry, PluginContext(), allow_experimental_plugins=True).plugins["sticky"]


async def test_epp_serve_refuses_it_at_start_naming_the_flag() -> None:
    rc, lines = await run_serve("--pool-name=p", "--config-text", SESSION)
    assert rc == 1
    assert any("--allow-experimental-plugins" in line and "session-affinity-scorer" in line for line in lines)
