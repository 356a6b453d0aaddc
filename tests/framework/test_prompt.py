"""The prompt each parser reads, as prefix matching sees it: rendering, ordering, extension, bounds."""

from __future__ import annotations

from scheduling_builders import parsed


def test_multi_turn_chat_extends_the_previous_turn() -> None:
    def chat(*turns: str) -> bytes:
        body = {"model": "m", "messages": [{"role": "user", "content": t} for t in turns]}
        return parsed("/v1/chat/completions", body).prompt.prefix(10_000)

    assert chat("hello " * 50, "and more " * 50).startswith(chat("hello " * 50))


def test_anthropic_messages_render_system_then_turns_and_extend() -> None:
    def messages(*turns: str) -> bytes:
        body = {
            "system": [{"type": "text", "text": "be terse"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": t}]} for t in turns],
        }
        return parsed("/v1/messages", body).prompt.prefix(10_000)

    turn1 = messages("hello")
    assert turn1 == b"<|system|>be terse\n<|user|>hello\n"
    assert messages("hello", "again").startswith(turn1)


def test_token_ids_json_and_unread_prompts() -> None:
    assert parsed("/inference/v1/generate", {"token_ids": [1, 2]}).prompt.prefix(100) == b"[1, 2]"
    assert parsed("/v1/completions", {"model": "m", "prompt": [7, 8]}).prompt.prefix(100) == b"[7, 8]"
    responses = parsed("/v1/responses", {"model": "m", "instructions": "be brief", "input": "hi"})
    assert responses.prompt.prefix(100) == b'{"instructions": "be brief"}"hi"'
    assert parsed("/v1/models/x/predict", {"anything": 1}).prompt.prefix(100) == b""  # passthrough: unread
    assert parsed("/v1/images/generations", {"model": "m", "prompt": "a cat"}).prompt.prefix(100) == b""


def test_completions_prompt_forms_and_the_limit() -> None:
    assert parsed("/v1/completions", {"model": "m", "prompt": ["ab", "cd"]}).prompt.prefix(100) == b"ab cd"
    big = parsed("/v1/completions", {"model": "m", "prompt": "z" * 220_000})
    assert len(big.prompt.prefix(16_384)) == 16_384
