"""token-producer: the vllm backend asks the model server to render, the local one agrees with it,
a failed tokenization only falls back (the request keeps being scheduled, never rejected), and
without a backend it is upstream's estimate (pseudo-tokens from the prompt's bytes)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from scheduling_builders import parsed

from epp.datalayer.http_client import SessionClient
from epp.framework.data_keys import EstimatedTokens
from epp.framework.measures import TokenCacheCounts
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.request import ApiKind, InferenceRequest
from epp.plugins import token_producer
from epp.plugins.token_estimate import EstimatingTokenProducer
from epp.requestcontrol.plugin_series import Readings
from epp.tokenize.local import default_workers
from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.tiny_tokenizer import sentence


@pytest.fixture
async def context() -> AsyncIterator[PluginContext]:
    """A plugin context with a shared HTTP client, as the runtime makes it."""
    http = SessionClient()
    try:
        yield PluginContext(http=http)
    finally:
        await http.aclose()


def _request(api: ApiKind, body: dict[str, object]) -> InferenceRequest:
    request = InferenceRequest("r", model="m", api=api)
    request.body = body
    return request


async def test_vllm_render_and_local_backends_agree(tokenizer_dir: Path, context: PluginContext) -> None:
    text = sentence(random.Random(3), 40)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]
    async with ModelServer(SimConfig(model="m", tokenizer=str(tokenizer_dir)), host="127.0.0.2") as server:
        remote = token_producer.create("t", {"modelName": "m", "vllm": {"url": server.url}}, context)
        local = token_producer.create("l", {"local": {"tokenizerPath": str(tokenizer_dir)}}, PluginContext())
        held = 0
        try:
            for api, body in (
                (ApiKind.COMPLETIONS, {"prompt": text}),
                (ApiKind.CHAT_COMPLETIONS, {"messages": messages}),
            ):
                a, b = _request(api, body), _request(api, body)
                await remote.produce(a)
                await local.produce(b)
                assert a.token_ids is not None and b.token_ids is not None and len(a.token_ids) > 10
                assert list(a.token_ids) == list(b.token_ids)
                held += len(a.token_ids)
            assert remote.failures == 0
            for producer in (remote, local):  # the completion again: served whole by either cache
                await producer.produce(_request(ApiKind.COMPLETIONS, {"prompt": text}))
            caches = Readings.of([remote, local]).token_caches
            assert caches[("t", "token-producer")] == TokenCacheCounts(hits=1, misses=2, tokens=held)
            assert caches[("l", "token-producer")] == TokenCacheCounts(hits=1, misses=2, tokens=held, prefix_reuse=True)
        finally:
            await remote.aclose()


async def test_failed_tokenization_leaves_the_request_without_tokens(context: PluginContext) -> None:
    refused = token_producer.create(
        "t", {"modelName": "m", "vllm": {"url": "http://127.0.0.1:9", "timeout": "200ms"}}, context
    )
    async with ModelServer(SimConfig(model="m"), host="127.0.0.2") as server:
        missing = token_producer.create("t", {"modelName": "m", "vllm": {"url": server.url + "/nowhere"}}, context)
        for producer in (refused, missing):  # no server there; a server without the render endpoints (404)
            request = _request(ApiKind.COMPLETIONS, {"prompt": "hello"})
            await producer.produce(request)  # never raises
            assert request.token_ids is None
            assert producer.failures == 1


def test_the_vllm_backend_needs_the_pickers_http_client() -> None:
    with pytest.raises(PluginConfigError, match="needs the picker's HTTP client"):
        token_producer.create("t", {"modelName": "m"}, PluginContext())


def test_no_backend_is_upstreams_estimate_and_the_unsupported_settings_are_refused() -> None:
    for params in ({}, {"estimate": {}}):
        assert isinstance(token_producer.create("t", params, PluginContext()), EstimatingTokenProducer)
    refusals = (
        ({"estimate": {"image": {"mode": "static"}}}, r"estimate\.image: multimodal placeholder estimation"),
        ({"estimate": {}, "modelName": "m"}, "estimate excludes"),
        ({"udsTokenizerConfig": {"socketFile": "/tmp/s"}}, "udsTokenizerConfig"),
    )
    for params, message in refusals:
        with pytest.raises(PluginConfigError, match=message):
            token_producer.create("t", params, PluginContext())


async def test_estimate_pseudo_tokens_are_the_prompts_bytes_and_client_ids_pass_through() -> None:
    producer = token_producer.create("t", {}, PluginContext())
    request = parsed("/v1/completions", {"model": "m", "prompt": "abcdefgh" + "i"})
    await producer.produce(request, [])
    ids = request.token_ids
    assert isinstance(ids, EstimatedTokens) and len(ids) == 3
    assert ids[0] == int.from_bytes(b"abcd", "little") and ids[2] == ord("i")  # zero-padded last token
    assert ids.packed(4) == b"abcd"
    given = parsed("/v1/completions", {"model": "m", "prompt": [5, 6, 7]})
    await producer.produce(given, [])
    assert list(given.token_ids or ()) == [5, 6, 7]
    header_only = InferenceRequest("r")
    await producer.produce(header_only, [])
    assert header_only.token_ids is None


async def test_the_local_tokenizers_threads_default_to_this_processes_share_of_the_cores(tokenizer_dir: Path) -> None:
    params = {"local": {"tokenizerPath": str(tokenizer_dir)}}
    cores = default_workers()
    alone = token_producer.create("t", params, PluginContext())
    shared = token_producer.create("t", params, PluginContext(serving_processes=cores * 2))
    assert isinstance(alone, token_producer.TokenProducer) and isinstance(shared, token_producer.TokenProducer)
    assert (alone.local_threads, shared.local_threads) == (cores, 1)
    await alone.aclose()
    await shared.aclose()
