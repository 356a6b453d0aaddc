"""``epp serve`` without Kubernetes: a configuration whose ``dataLayer.discovery`` lists the endpoints.

Upstream's runner takes its file-discovery path when the configuration names a discovery plugin:
no API server is contacted, no InferencePool or other CRD is read, the pool is the flags' (or
``epp``). Here that mode is decided from the configuration text before anything starts
(:func:`discovery_configured`), and what only works with an API server is refused by name rather
than left unused (:func:`check_discovery_options`): ``--endpoint-selector``, several
``--pool-name``, leader election (a Lease) and ``/metrics`` authentication by TokenReview. The
discovery plugin the picker started with keeps running across reloads, so a reload that changes
it (or adds or removes it) is refused (:func:`discovery_refusal`): restart to change it.
"""

from __future__ import annotations

from epp.config.loader import LoadedConfig
from epp.config.options import OptionsError, ServeOptions
from epp.config.picker_config import ConfigError, PluginSpec, decode_config

__all__ = ["check_discovery_options", "discovery_configured", "discovery_refusal"]

_WHY = "dataLayer.discovery runs the picker without Kubernetes"


def discovery_configured(text: str) -> bool:
    """Whether the configuration names a discovery plugin (an invalid one is left to the full load to report)."""
    if not text.strip():
        return False
    try:
        config = decode_config(text)
    except ConfigError:
        return False
    section = config.data_layer
    return section is not None and section.discovery is not None and bool(section.discovery.plugin_ref)


def check_discovery_options(options: ServeOptions) -> None:
    """OptionsError naming each flag that needs the Kubernetes API."""
    problems = []
    if options.standalone:
        problems.append("--endpoint-selector watches pods: the discovery plugin lists the endpoints")
    if len(options.pool_names) > 1:
        problems.append("several --pool-name: the discovery plugin serves one pool")
    if options.leader_election:
        problems.append("--ha-enable-leader-election holds a Lease in the API server")
    if options.metrics_endpoint.auth:
        problems.append(
            "--metrics-endpoint-auth checks tokens with the API server (TokenReview): set it to false "
            "(with --metrics-cert-dir and --metrics-client-ca-file to require client certificates)"
        )
    if problems:
        raise OptionsError(f"{_WHY}; " + "; ".join(problems))


def _discovery_spec(config: LoadedConfig) -> PluginSpec | None:
    section = config.config.data_layer
    if section is None or section.discovery is None or not section.discovery.plugin_ref:
        return None
    ref = section.discovery.plugin_ref
    return next((p for p in config.config.plugins if p.name == ref), None)


def discovery_refusal(current: LoadedConfig | None, reloaded: LoadedConfig) -> ConfigError | None:
    """A reload that changes the discovery plugin (type, parameters, presence); None when it keeps it."""
    if current is None:
        return None
    before, after = _discovery_spec(current), _discovery_spec(reloaded)
    same = (before is None and after is None) or (
        before is not None
        and after is not None
        and (before.type, dict(before.parameters or {})) == (after.type, dict(after.parameters or {}))
    )
    if same:
        return None
    return ConfigError("dataLayer.discovery: the endpoint discovery cannot change on reload; restart the picker")
