"""The picker without Kubernetes, as the configuration decides it: detected from the text, the discovery
plugin checked at load, flags needing an API server refused, and a reload that changes discovery refused."""

from __future__ import annotations

from typing import Any

import pytest

from epp.config.discovery_mode import check_discovery_options, discovery_configured, discovery_refusal
from epp.config.loader import ConfigError, LoadedConfig, load_config
from epp.config.options import MetricsEndpointOptions, OptionsError, ServeOptions
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.plugins import register_in_tree
from epp.plugins.file_discovery import FileDiscovery

HEADER = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
NO_AUTH = MetricsEndpointOptions(auth=False)


def _text(path: str = "/etc/epp/endpoints.yaml", ref: str = "file-discovery") -> str:
    return (
        HEADER
        + f"""plugins:
- type: file-discovery
  parameters: {{path: {path}}}
- type: queue-scorer
dataLayer:
  discovery:
    pluginRef: {ref}
"""
    )


def _load(text: str) -> LoadedConfig:
    registry = PluginRegistry()
    register_in_tree(registry)
    return load_config(text, registry, PluginContext())


def test_the_configuration_decides_and_the_plugin_is_checked() -> None:
    assert discovery_configured(_text())
    assert not discovery_configured(HEADER + "plugins:\n- type: queue-scorer\n")
    assert not discovery_configured("")
    assert not discovery_configured("not: [yaml")  # left to the full load to report
    loaded = _load(_text())
    assert isinstance(loaded.discovery, FileDiscovery)
    assert _load(HEADER + "plugins:\n- type: queue-scorer\n").discovery is None
    with pytest.raises(ConfigError, match=r"dataLayer\.discovery\.pluginRef: plugin 'queue-scorer' .* not an endpoint"):
        _load(_text(ref="queue-scorer"))
    with pytest.raises(ConfigError, match="references undefined plugin 'missing'"):
        _load(_text(ref="missing"))


def test_without_a_pool_name_a_configuration_may_name_the_endpoints() -> None:
    check_discovery_options(ServeOptions(config_text=_text(), metrics_endpoint=NO_AUTH))
    with pytest.raises(OptionsError, match="exactly one of --pool-name or --endpoint-selector"):
        ServeOptions()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"endpoint_selector": "app=x", "endpoint_target_ports": (8000,)}, "--endpoint-selector watches pods"),
        ({"pool_names": ("a", "b")}, "several --pool-name"),
        ({"leader_election": True}, "--ha-enable-leader-election holds a Lease"),
        ({"metrics_endpoint": MetricsEndpointOptions(auth=True)}, "--metrics-endpoint-auth checks tokens"),
    ],
)
def test_flags_that_need_an_api_server_are_refused_by_name(options: dict[str, Any], named: str) -> None:
    with pytest.raises(OptionsError, match=f"dataLayer.discovery runs the picker without Kubernetes; {named}"):
        check_discovery_options(ServeOptions(**{"config_text": _text(), "metrics_endpoint": NO_AUTH, **options}))


def test_a_reload_that_changes_discovery_is_refused() -> None:
    current = _load(_text())
    assert discovery_refusal(current, _load(_text())) is None
    assert discovery_refusal(None, _load(_text("/other.yaml"))) is None
    for changed in (_load(_text("/other.yaml")), _load(HEADER + "plugins:\n- type: queue-scorer\n")):
        refusal = discovery_refusal(current, changed)
        assert refusal is not None and "cannot change on reload" in str(refusal)
