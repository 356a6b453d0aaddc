"""The simulator's OpenAI-API refusals, worded and shaped as vLLM 0.32 words and shapes them.

Every refusal is ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status as
``code``. A body that is not JSON, or not an object, is refused the way vLLM's request
validation (FastAPI + pydantic) refuses it: type ``Bad Request``, ``param`` the location
(``body.<char offset>`` for bad JSON, ``body`` for a non-object) and pydantic's one-error message,
so a client (or a picker relaying the error) sees the same bytes from both. Before that, a body
whose ``Content-Type`` is not ``application/json`` (or that has none) is refused, as vLLM does.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

__all__ = ["OpenAIError", "dumps", "error_response", "json_response", "parse_body", "require_json"]


def dumps(obj: object) -> str:
    """Compact JSON, as vLLM (pydantic) writes it."""
    return json.dumps(obj, separators=(",", ":"))


def json_response(body: object, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=dumps)


class OpenAIError(Exception):
    """A request refused with ``status`` (the message says why, ``param`` names the field)."""

    def __init__(self, status: int, message: str, *, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def response(self) -> web.Response:
        return error_response(self.status, self.message, self.err_type, self.param)


def error_response(status: int, message: str, err_type: str, param: str | None = None) -> web.Response:
    return json_response({"error": {"message": message, "type": err_type, "param": param, "code": status}}, status)


def _validation_error(kind: str, loc: str, msg: str, input_repr: str, ctx: dict[str, str] | None = None) -> OpenAIError:
    detail: dict[str, Any] = {"type": kind, "loc": loc, "msg": msg, "input": input_repr}
    if ctx is not None:
        detail["ctx"] = ctx
    return OpenAIError(400, f"1 validation error:\n  {detail!r}", err_type="Bad Request", param=loc)


def require_json(request: web.Request) -> None:
    """vLLM serves JSON bodies only: any other ``Content-Type`` (or none) is refused before the body is read."""
    if request.content_type != "application/json":
        message = "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
        raise OpenAIError(400, message, err_type="Bad Request")


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object; :class:`OpenAIError` (vLLM's wording) otherwise."""
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as e:
        raise _validation_error(
            "json_invalid", f"body.{e.pos}", "JSON decode error", "<dict of 0 items>", {"error": e.msg}
        ) from e
    except UnicodeDecodeError as e:
        raise _validation_error(
            "json_invalid", "body.0", "JSON decode error", "<dict of 0 items>", {"error": str(e)}
        ) from e
    if not isinstance(body, dict):
        what = f"<list of {len(body)} items>" if isinstance(body, list) else repr(body)
        raise _validation_error(
            "model_attributes_type", "body", "Input should be a valid dictionary or object to extract fields from", what
        )
    return body
