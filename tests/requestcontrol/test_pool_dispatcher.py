"""PoolDispatcher: which pool's director a request gets, from the pool header, the same for one pool or many."""

from __future__ import annotations

import pytest

from epp.errors import EppError, ErrorCode
from epp.framework.request import InferenceRequest
from epp.requestcontrol.pools import PoolDispatcher


def request(pool: str | None = None) -> InferenceRequest:
    return InferenceRequest(request_id="r", headers={} if pool is None else {"x-gateway-inference-pool": pool})


def code_of(dispatcher: PoolDispatcher[str], pool: str) -> tuple[ErrorCode, str]:
    with pytest.raises(EppError) as caught:
        dispatcher.pool_for(request(pool))
    return caught.value.code, str(caught.value)


POOLS = {("team-a", "llama"): "a/llama", ("team-b", "llama"): "b/llama", ("team-a", "qwen"): "a/qwen"}


def test_no_header_goes_to_the_first_pool() -> None:
    assert PoolDispatcher(POOLS).pool_for(request()) == "a/llama"
    assert PoolDispatcher(POOLS).pool_for(request("")) == "a/llama"


def test_namespace_slash_name_and_an_unambiguous_bare_name() -> None:
    dispatcher = PoolDispatcher(POOLS)
    assert dispatcher.pool_for(request("team-b/llama")) == "b/llama"
    assert dispatcher.pool_for(request("team-a/qwen")) == "a/qwen"
    assert dispatcher.pool_for(request("qwen")) == "a/qwen"


def test_a_bare_name_two_namespaces_share_is_refused_as_ambiguous() -> None:
    code, message = code_of(PoolDispatcher(POOLS), "llama")
    assert code is ErrorCode.BAD_REQUEST
    assert "pool name 'llama' is ambiguous; use namespace/name" in message


@pytest.mark.parametrize("pools", [POOLS, {("team-a", "llama"): "a/llama"}], ids=["many-pools", "one-pool"])
@pytest.mark.parametrize("wanted", ["mistral", "team-c/llama", "team-b/qwen"])
def test_a_pool_not_served_is_404_whether_one_pool_is_served_or_many(
    pools: dict[tuple[str, str], str], wanted: str
) -> None:
    code, message = code_of(PoolDispatcher(pools), wanted)
    assert code is ErrorCode.NOT_FOUND
    assert f"unknown inference pool {wanted!r}" in message


def test_at_least_one_pool() -> None:
    with pytest.raises(ValueError, match="at least one pool"):
        PoolDispatcher({})
