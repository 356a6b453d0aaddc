"""The llm-d router's sample configurations (the pinned list in ``tests/upstream_configs/``) here: each one
loads and routes a request through a pool's real pipeline, or is refused naming the type or setting this
picker lacks; and docs/plugin-types.md's tables are what the code does."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from pool_harness import Harness
from scheduling_builders import NOW

from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework.endpoint import MetricsSnapshot
from epp.framework.request import InferenceRequest
from epp.labels import parse_selector
from epp.plugins.refused import REFUSED

ROOT = Path(__file__).resolve().parents[2]
PORT = 8000
PODS = (  # two decode pods, a prefill pod and an encode pod, in llm-d's role label and the docs' plain `role`
    ("decode-0", "10.0.0.1", "decode"),
    ("decode-1", "10.0.0.2", "decode"),
    ("prefill-0", "10.0.0.3", "prefill"),
    ("encode-0", "10.0.0.4", "encode"),
)


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plugin_type_table", ROOT / "scripts" / "plugin_type_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("plugin_type_table", module)
    spec.loader.exec_module(module)
    return module


TABLE = _script()
OUTCOMES = TABLE.outcomes()


def test_the_pinned_list_is_upstreams_and_holds_every_kind_of_sample() -> None:
    index = TABLE.pinned()
    registry = TABLE.DATA / "registry.yaml"
    assert index["commit"] in registry.read_text()  # one upstream commit for both
    sources = [e["source"] for e in index["configs"]]
    assert len(sources) >= 41  # the issue measured 41
    for kind in ("deploy/config/", "config/charts/", "test/perf/", "test/e2e/", "wellknown_configs_test.go", ".md"):
        assert any(kind in s for s in sources), kind


def test_docs_tables_are_what_the_code_does() -> None:
    doc = TABLE.DOC.read_text()
    for marker in (*TABLE.TABLES.values(), *TABLE.END.values()):
        assert marker in doc, f"docs/plugin-types.md lost {marker}"
    wanted = TABLE.render(doc, {"types": TABLE.type_table(), "configs": TABLE.config_table(OUTCOMES)})
    assert wanted == doc, "docs/plugin-types.md is out of date: run .venv/bin/python scripts/plugin_type_table.py"
    assert "**unknown**" not in wanted and "**error**" not in wanted


@pytest.mark.parametrize("outcome", [o for o in OUTCOMES if o.loaded is None], ids=lambda o: str(o.entry["id"]))
def test_a_configuration_that_does_not_load_is_refused_naming_what_is_missing(outcome: Any) -> None:
    assert outcome.refused, outcome.error
    assert outcome.refused.split(".parameters.")[0] in outcome.text


def _store() -> Datastore:
    store = Datastore()
    store.set_pool(PoolSpec("pool", "default", parse_selector("app=vllm"), (PORT,)))
    for name, ip, role in PODS:
        store.upsert_pod(PodInfo(name, "default", ip, {"app": "vllm", "llm-d.ai/role": role, "role": role}, ready=True))
    for state in store.endpoints():  # scraped just now and idle: the saturation detectors let work through
        state.metrics = MetricsSnapshot(updated_at=NOW)
    return store


@pytest.mark.parametrize("outcome", [o for o in OUTCOMES if o.loaded is not None], ids=lambda o: str(o.entry["id"]))
async def test_a_configuration_that_loads_routes_a_request(outcome: Any) -> None:
    harness = Harness(_store(), config_text=outcome.text, allow_experimental_plugins=True)
    await harness.routing.start()  # the flow-control queue, for the samples with the flowControl gate
    try:
        if "vllmhttp-parser" in outcome.text:  # vLLM's generate API: tokens in, the only path that parser claims
            path, fields = "/inference/v1/generate", {"token_ids": list(range(1, 400)), "sampling_params": {}}
        else:
            path, fields = "/v1/completions", {"prompt": "summarise the ticket history " * 40, "max_tokens": 8}
        request = InferenceRequest("r", headers={":path": path, "x-session-id": "s-1"})
        body = orjson.dumps({"model": "m", **fields})
        ctx = harness.pipeline.parse(request, body, None)
        routing = asyncio.create_task(harness.pipeline.route(ctx))
        while not routing.done():  # a producer may wait out a window on the picker's (manual) clock
            await asyncio.sleep(0)
            if harness.clock.sleepers:
                harness.clock.advance(0.1)
        decision = routing.result()
        assert decision.targets and decision.targets[0].endpoint.address in {ip for _, ip, _ in PODS}
        harness.finished(ctx, completed=True, status=200)
    finally:
        await harness.routing.stop()
        await harness.routing.aclose()
        await harness.http.aclose()


def test_every_upstream_type_is_known_and_no_refusal_shadows_a_plugin() -> None:
    registry = TABLE.registry()
    upstream = {t["type"] for t in TABLE.yaml.safe_load((TABLE.DATA / "registry.yaml").read_text())["types"]}
    assert upstream <= set(registry.types())
    shadowed = [t for t in REFUSED if registry.refusal(t) is None]
    assert shadowed == [], f"registered types still listed in epp/plugins/refused.py: {shadowed}"
    assert set(REFUSED) <= upstream  # a refusal is for an upstream type, by its upstream name
