"""The response half of a model rewrite: the client always sees the model it asked for, however the
model server's answer is cut into chunks (SSE and plain JSON, in the GIE mode, with and without trailers)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from epp.extproc import pb
from epp.extproc.model_rename import ModelRenamer
from epp.extproc.response_relay import ResponseRelay

SERVED, CLIENT = "meta-llama/Llama-3.1-8B-Instruct-lora-7", "llama"
SSE = (
    b'data: {"id":"1","object":"chat.completion.chunk","model":"' + SERVED.encode() + b'","choices":[]}\n\n'
    b'data: {"id":"1","model": "' + SERVED.encode() + b'","choices":[{"delta":{"content":"hi"}}]}\n\n'
    b"data: [DONE]\n\n"
)
JSON = b'{"id":"c","object":"text_completion","model":"' + SERVED.encode() + b'","usage":{"prompt_tokens":3}}'
WANTED_SSE = SSE.replace(SERVED.encode(), CLIENT.encode())
WANTED_JSON = JSON.replace(SERVED.encode(), CLIENT.encode())


def _bodies(answers: Sequence[pb.ProcessingResponse]) -> bytes:
    return b"".join(a.response_body.response.body_mutation.streamed_response.body for a in answers)


def _relay(*, sse: bool) -> ResponseRelay:
    return ResponseRelay(
        mode=pb.BODY_FULL_DUPLEX_STREAMED, chunk_size=62_000, max_buffer=1 << 20, sse=sse, rename=(SERVED, CLIENT)
    )


@pytest.mark.parametrize(("body", "wanted", "sse"), [(SSE, WANTED_SSE, True), (JSON, WANTED_JSON, False)])
def test_every_cut_of_the_response_reaches_the_client_renamed(body: bytes, wanted: bytes, sse: bool) -> None:
    for cut in range(len(body) + 1):
        relay = _relay(sse=sse)
        out = _bodies(relay.on_body(pb.HttpBody(body=body[:cut])))
        out += _bodies(relay.on_body(pb.HttpBody(body=body[cut:], end_of_stream=True)))
        assert out == wanted, cut
        assert relay.done


def test_bytes_held_back_at_a_cut_are_sent_when_trailers_end_the_response() -> None:
    cut = SSE.index(b'"model"') + 5  # the stream stops inside a would-be match, then trailers come
    relay = _relay(sse=True)
    out = _bodies(relay.on_body(pb.HttpBody(body=SSE[:cut])))
    assert not out.endswith(b'"mode')  # held back: it may be the start of a match
    out += _bodies(relay.on_trailers())
    assert out == SSE[:cut]
    assert relay.done


def test_a_three_way_cut_and_a_name_that_is_not_the_served_one() -> None:
    other = b'{"model":"' + SERVED.encode() + b'-2","n":1}'  # a longer name is not a match
    for body in (SSE, other):
        wanted = ModelRenamer(SERVED, CLIENT).feed(body, end=True)
        for i in range(0, len(body) + 1, 3):
            for j in range(i, len(body) + 1, 7):
                renamer = ModelRenamer(SERVED, CLIENT)
                out = renamer.feed(body[:i]) + renamer.feed(body[i:j]) + renamer.feed(body[j:], end=True)
                assert out == wanted, (i, j)
    assert ModelRenamer(SERVED, CLIENT).feed(other, end=True) == other
