"""SGLang's /generate through a real Envoy: parsed by sglanghttp-parser, routed, its meta_info usage read.

The pool serves SGLang's native API (the simulator answers /generate as an SGLang server does); the
picker lists the parser as upstream's configurations do (``requestHandler.parsers``). A pre-tokenized
prompt is routed and answered, as JSON and as a stream, and the usage of both answers reaches the
picker's token series; a text prompt, which upstream's parser does not take, is refused with its 400.
"""

from __future__ import annotations

import json

import aiohttp

from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.envoy import ext_proc_problems

CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: sglanghttp-parser
- type: openai-parser
- type: queue-scorer
- type: prefix-cache-scorer
requestHandler:
  parsers:
  - pluginRef: sglanghttp-parser
  - pluginRef: openai-parser
"""


async def test_sglang_generate_through_envoy(epp_pool: PoolFactory) -> None:
    env = await epp_pool("v1", pods=2, picker_args=["--config-text", CONFIG], envoy=True)
    ids = list(range(100, 140))
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 4}}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{env.envoy_url}/generate", json=body) as resp:
            answer = await resp.json()
            assert resp.status == 200, answer
        assert answer["meta_info"]["completion_tokens"] == 4
        assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
        async with http.post(f"{env.envoy_url}/generate", json={**body, "stream": True}) as resp:
            assert resp.status == 200
            text = (await resp.read()).decode()
        events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        assert events[-1]["meta_info"]["finish_reason"] is not None
        served = [sim.stats() for sim in env.servers if sim.stats()["requests"]]
        assert {s["last_path"] for s in served} == {"/generate"}

        async with http.post(f"{env.envoy_url}/generate", json={"text": "hello"}) as resp:
            assert resp.status == 400
            assert "invalid generate request: input_ids must be provided" in await resp.text()

    prompt = answer["meta_info"]["prompt_tokens"]
    assert prompt == len(ids)
    labels = {"model_name": "", "target_model_name": ""}
    assert env.sample("inference_objective_output_tokens_sum", **labels) == 8  # both answers' usage was read
    assert env.sample("inference_objective_input_tokens_sum", **labels) == 2 * prompt
    assert ext_proc_problems(await env.envoy.counters()) == {}
