"""The decode answer's ``usage.prompt_tokens_details.cached_tokens``, set to what the prefill found cached.

After a remote prefill the decode engine reports the transferred prompt as its own cache hits; the
client should see the prefill's cache hits instead (llm-d router ``cached_tokens_usage_rewriter.go``).
A JSON answer is rewritten whole; an SSE stream line by line, as it passes (a ``data:`` line whose
chunk has a ``usage`` object gets the value, ``prompt_tokens_details`` created when absent; every
other line goes through unchanged). The length changes, so the answer loses its ``Content-Length``.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["CachedTokensRewriter", "cached_tokens_of"]


def cached_tokens_of(answer: Any) -> int:
    """``usage.prompt_tokens_details.cached_tokens`` of a JSON answer; 0 when absent (vLLM sends null for 0)."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _with_cached(document: Any, cached: int) -> bool:
    usage = document.get("usage") if isinstance(document, dict) else None
    if not isinstance(usage, dict):
        return False
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict):
        details = usage["prompt_tokens_details"] = {}
    details["cached_tokens"] = cached
    return True


class CachedTokensRewriter:
    """Feed the answer's chunks in order; each call returns what to send on (``finish`` the rest)."""

    __slots__ = ("_buffer", "_cached", "_sse")

    def __init__(self, cached: int, *, sse: bool) -> None:
        self._cached = cached
        self._sse = sse
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> bytes:
        self._buffer += chunk
        if not self._sse:
            return b""  # a JSON answer is rewritten whole, at the end
        end = self._buffer.rfind(b"\n")
        if end < 0:
            return b""
        complete = bytes(self._buffer[: end + 1])
        del self._buffer[: end + 1]
        return b"".join(self._line(line) for line in complete.splitlines(keepends=True))

    def finish(self) -> bytes:
        rest, self._buffer = bytes(self._buffer), bytearray()
        if not rest:
            return b""
        if self._sse:
            return self._line(rest)
        try:
            document = orjson.loads(rest)
        except orjson.JSONDecodeError:
            return rest
        return orjson.dumps(document) if _with_cached(document, self._cached) else rest

    def _line(self, line: bytes) -> bytes:
        if not line.startswith(b"data:") or b'"usage"' not in line:
            return line
        body = line[5:].strip()
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            return line
        if not _with_cached(document, self._cached):
            return line
        ending = line[len(line.rstrip(b"\r\n")) :]
        return b"data: " + orjson.dumps(document) + ending
