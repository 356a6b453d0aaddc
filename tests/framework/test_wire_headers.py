"""Control headers under both spellings: the llm-d one wins, and none reaches the model server."""

from __future__ import annotations

import pytest

from epp.framework import headers as wire


@pytest.mark.parametrize(
    ("name", "llm_d"),
    [
        (wire.OBJECTIVE, "x-llm-d-inference-objective"),
        (wire.MODEL_NAME_REWRITE, "x-llm-d-model-name-rewrite"),
        (wire.FAIRNESS_ID, "x-llm-d-inference-fairness-id"),
    ],
)
def test_either_spelling_is_read_and_the_llm_d_one_wins(name: str, llm_d: str) -> None:
    assert wire.read({name: "old"}, name) == "old"
    assert wire.read({llm_d: "new"}, name) == "new"
    assert wire.read({name: "old", llm_d: "new"}, name) == "new"
    assert wire.read({name: "old", llm_d: ""}, name) == ""  # present wins even when empty, as upstream
    assert wire.read({"x-request-id": "r"}, name) is None
    assert {name, llm_d} <= wire.SYSTEM_OWNED


def test_only_control_headers_have_aliases() -> None:
    with pytest.raises(KeyError):
        wire.read({}, wire.REQUEST_ID)
