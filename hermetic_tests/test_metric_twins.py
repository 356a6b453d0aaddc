"""``--metrics-naming``: the picker's /metrics under GIE's names, the llm-d router's, or both with equal values.

Under ``both`` (the default) each GIE series' HELP names its ``llm_d_epp_*`` twin, as the llm-d
router's does; the twin must carry the same observations (its labels may be finer: the request
series add ``fairness_id``, so values are compared summed over labels, per sample kind and bucket).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from epp_sim.kube_objects import inference_objective, model_rewrite
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.extproc_client import post_headers, request_body, request_headers, response_body, response_headers
from epp_sim.stack.hermetic import DEFAULT_POOL, HermeticPool

OBJECTS = [
    inference_objective("batch", -1, DEFAULT_POOL),
    model_rewrite("food", DEFAULT_POOL, {"food-1": 1}, model="food"),
]
TWIN = re.compile(r"^\[ALPHA\] \[Deprecated: Use (\w+)\] ")
Totals = dict[tuple[str, str], float]


async def exchange(env: HermeticPool) -> None:
    """One request with a response and its usage, as Envoy relays them; sheddable, from tenant-a."""
    call = env.client.open()
    headers = post_headers(**{"x-llm-d-inference-objective": "batch", "x-llm-d-inference-fairness-id": "tenant-a"})
    await call.send(request_headers(headers), request_body(json.dumps({"model": "food", "prompt": "hi"}).encode()))
    await call.recv(2)
    usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    answer = {"object": "text_completion", "model": "food-1", "usage": usage}
    await call.send(
        response_headers({":status": "200", "content-type": "application/json"}),
        response_body(json.dumps(answer).encode(), eos=True),
    )
    await call.recv(2)
    await call.end()


async def scrape(env: HermeticPool) -> str:
    async with aiohttp.ClientSession() as session, session.get(env.picker.metrics_url) as resp:
        assert resp.status == 200
        return await resp.text()


def totals(text: str) -> tuple[dict[str, Totals], dict[str, str]]:
    """Per family: values summed over labels by (sample suffix, bucket); and each GIE family's twin."""
    values: dict[str, Totals] = {}
    twins: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        summed: Totals = defaultdict(float)
        for sample in family.samples:
            suffix = sample.name.removeprefix(family.name)
            if suffix != "_created":
                summed[(suffix, sample.labels.get("le", ""))] += sample.value
        values[family.name] = {k: v for k, v in summed.items() if v}
        twin = TWIN.match(family.documentation)
        if twin is not None:
            twins[family.name] = twin.group(1).removesuffix("_total")
    return values, twins


async def test_every_twin_carries_the_value_of_its_gie_series(epp_pool: PoolFactory) -> None:
    env = await epp_pool("v1", pods=2, objects=OBJECTS)
    await exchange(env)
    values, twins = totals(await scrape(env))
    # Every upstream series but v0.3's inference_model_request_total (5 of flow control, 6 of SLO routing).
    assert len(twins) == 34
    for gie, twin in twins.items():
        assert values[gie] == values[twin], f"{gie} vs {twin}"
    for gie in ("inference_objective_request", "inference_objective_input_tokens", "inference_pool_ready_pods"):
        assert values[gie], f"{gie} has a value"
    labels = {"model_name": "food", "target_model_name": "food-1"}
    assert env.sample("inference_objective_request_total", priority="-1", **labels) == 1
    assert env.sample("llm_d_epp_request_total", priority="-1", fairness_id="tenant-a", **labels) == 1
    assert env.sample("llm_d_epp_request_output_tokens_sum", priority="-1", fairness_id="tenant-a", **labels) == 7
    assert env.sample("llm_d_epp_request_running", priority="-1", fairness_id="tenant-a", **labels) == 0


@pytest.mark.parametrize(("naming", "absent"), [("gie", "llm_d_"), ("llm-d", "inference_")])
async def test_one_naming_serves_only_its_names(epp_pool: PoolFactory, naming: str, absent: str) -> None:
    env = await epp_pool("v1", pods=1, objects=OBJECTS, picker_args=["--metrics-naming", naming])
    await exchange(env)
    values, twins = totals(await scrape(env))
    assert twins == {}  # no HELP points at a twin that is not there
    assert [name for name in values if name.startswith(absent)] == []
    present = "llm_d_epp_request_output_tokens" if naming == "llm-d" else "inference_objective_output_tokens"
    assert values[present][("_sum", "")] == 7
