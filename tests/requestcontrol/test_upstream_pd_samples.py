"""Every P/D, E/P/D and data-parallel sample configuration of the llm-d router loads and routes here.

The samples are data: each is named by its place in llm-d/llm-d-router, and its text is the copy
pinned in ``tests/upstream_configs/`` (at the commit its index names). Each is loaded by the real
loader and a request is routed through a pool's real pipeline over labelled pods (one prefill, two
decode, one encode pod): a long uncached prompt, and for the E/P/D samples a prompt with an image,
whose routing is checked against what the sample is for (the decode pod serves; the prefill and
encode pods are named in their headers).

Every sample loads whole. Samples naming upstream's Alpha types (the ``topology-*`` plugins) load
as upstream deploys them, with ``--allow-experimental-plugins``, and are refused without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pool_harness import Harness
from scheduling_builders import NOW, parsed

from epp.config.loader import ConfigError
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework import headers
from epp.framework.plugin import PluginRegistry
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.framework.roles import ROLE_LABEL
from epp.labels import Selector
from epp.plugins import register_in_tree

PINNED = Path(__file__).resolve().parents[1] / "upstream_configs"
"""The pinned copies of llm-d's sample configurations (``scripts/upstream_configs.py`` writes them)."""


@dataclass(frozen=True)
class Sample:
    source: str
    """Where the sample is upstream: its file, and for a Go test or a Markdown page the case or the section."""
    pinned_as: str | None = None
    """The pinned index's ``where`` for it (the n-th string or block) when it is one of several in its file."""
    prefill: bool = False
    """A long uncached prompt names the prefill pod."""
    encode: bool = False
    """A prompt with an image names the encode pod."""
    primary_port: int = 0
    """The data-parallel rewrite: the destination's port, the rank in x-data-parallel-host-port."""

    @property
    def text(self) -> str:
        """The sample as pinned (a configuration found in several places is pinned once, the others under ``also``)."""
        path = self.source.split("#")[0]
        where = f"{path}#{self.pinned_as}" if self.pinned_as else path
        index = yaml.safe_load((PINNED / "index.yaml").read_text())
        found = [
            e["file"]
            for e in index["configs"]
            if (e["source"] == path and e["where"] == self.pinned_as) or where in e.get("also", ())
        ]
        assert len(found) == 1, f"{self.source}: pinned as {where!r} {len(found)} times in {PINNED / 'index.yaml'}"
        return (PINNED / found[0]).read_text()


_WELL_KNOWN = "test/integration/epp/wellknown_configs_test.go"
SAMPLES = (
    Sample("deploy/config/pd-epp-config.yaml", prefill=True),
    Sample("deploy/config/pd-topology-epp-config.yaml", prefill=True),
    Sample("deploy/config/sim-pd-epp-config.yaml", prefill=True),
    Sample("deploy/config/sim-e-p-d-epp-config.yaml", prefill=True, encode=True),
    Sample("deploy/config/sim-e-pd-epp-config.yaml", encode=True),
    Sample("deploy/config/dp-epp-config.yaml", primary_port=8000),
    # The well-lit-path guides' configurations, by the guide's name; pinned by their order in the file.
    Sample(f"{_WELL_KNOWN}#pd-disaggregation", "string2", prefill=True),
    Sample(f"{_WELL_KNOWN}#wide-ep-lws", "string3", prefill=True),
    # its decider keeps the default nonCachedTokens: 0, which disables P/D: decode-only
    Sample(f"{_WELL_KNOWN}#wide-ep-lws-experimental-dp-aware", "string4"),
    # Their own label scheme (role=...): without the label filters any pod may take each stage.
    Sample("docs/disaggregation.md#p-d-configuration", "block4", prefill=True),
    Sample("docs/disaggregation.md#e-p-d-configuration", "block5", prefill=True, encode=True),
)

LONG = "Summarise the following report in three bullet points. " * 30
IMAGE = {
    "model": "m",
    "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/cat.png"}}]}],
}
_ROLES = ("prefill", "decode", "decode", "encode")


def pool(*, ports: tuple[int, ...] = (8000,), labelled: bool = True) -> Datastore:
    store = Datastore()
    spec = PoolSpec(
        name="pool", namespace="default", selector=Selector.from_match_labels({"app": "vllm"}), target_ports=ports
    )
    pods = []
    for i, role in enumerate(_ROLES):
        labels = {"app": "vllm", ROLE_LABEL: role, "role": role} if labelled else {"app": "vllm"}
        pods.append(PodInfo(name=f"{role}-{i}", namespace="default", ip=f"10.0.0.{i}", labels=labels, ready=True))
    store.set_pool(spec, pods)
    for s in store.endpoints():
        s.metrics = s.metrics.__class__(updated_at=NOW)
    return store


def _registry() -> PluginRegistry:
    registry = PluginRegistry()
    register_in_tree(registry)
    return registry


def _loadable(sample: Sample) -> str:
    """The sample's text, once every type it names is registered here."""
    registered = _registry().types()
    missing = [p["type"] for p in yaml.safe_load(sample.text)["plugins"] if p["type"] not in registered]
    assert not missing, f"{sample.source}: unknown types {missing}"
    return sample.text


def _experimental(text: str) -> set[str]:
    registry = _registry()
    return {p["type"] for p in yaml.safe_load(text)["plugins"] if registry.is_experimental(p["type"])}


def _request(body: Mapping[str, Any], path: str) -> InferenceRequest:
    return parsed(path, body)


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.source for s in SAMPLES])
async def test_the_sample_loads_and_routes(sample: Sample) -> None:
    text = _loadable(sample)
    ports = (8000, 8001) if sample.primary_port else (8000,)
    alpha = _experimental(text)
    if alpha:  # upstream's deployment runs the picker with --allow-experimental-plugins=true
        with pytest.raises(ConfigError, match="--allow-experimental-plugins"):
            Harness(pool(ports=ports), config_text=text)
    h = Harness(pool(ports=ports), config_text=text, allow_experimental_plugins=bool(alpha))
    decision = await h.decide(_request({"model": "m", "prompt": LONG, "max_tokens": 4}, "/v1/completions"))
    _check_roles(text, decision)
    prefill = decision.upstream_headers.get(headers.PREFILLER_HOST_PORT)
    assert bool(prefill) is sample.prefill, f"{sample.source}: x-prefiller-host-port {prefill!r}"
    if sample.primary_port:
        assert decision.destination == f"{decision.targets[0].endpoint.address}:{sample.primary_port}"
        assert decision.upstream_headers[headers.DATA_PARALLEL_HOST_PORT] == decision.targets[0].endpoint.hostport
    if sample.encode:
        media = await h.decide(_request(IMAGE, "/v1/chat/completions"))
        _check_roles(text, media)
        assert media.upstream_headers.get(headers.ENCODER_HOSTS_PORTS), f"{sample.source}: no encoder named"


def _check_roles(text: str, decision: RoutingDecision) -> None:
    """Where the role filters are in the configuration, each stage went to a pod of its role."""
    if "decode-filter" in text:
        assert decision.targets[0].endpoint.labels[ROLE_LABEL] == "decode"
    named = decision.upstream_headers
    if "prefill-filter" in text and headers.PREFILLER_HOST_PORT in named:
        assert named[headers.PREFILLER_HOST_PORT] == "10.0.0.0:8000"  # the prefill pod
    if "encode-filter" in text and headers.ENCODER_HOSTS_PORTS in named:
        assert named[headers.ENCODER_HOSTS_PORTS] == "10.0.0.3:8000"  # the encode pod
