"""The one error type that crosses layers.

Everything below the ext_proc boundary raises :class:`EppError`; the stream turns it into an
Envoy ImmediateResponse whose body is ``inference error: <Code> - <Msg>`` (the upstream format)
and whose HTTP status comes from the code. Anything else reaching the boundary is Internal (500).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

__all__ = ["EppError", "ErrorCode"]


class ErrorCode(enum.Enum):
    """Upstream error codes, each with the HTTP status the gateway answers with."""

    BAD_REQUEST = ("BadRequest", 400)
    UNAUTHORIZED = ("Unauthorized", 401)
    FORBIDDEN = ("Forbidden", 403)
    NOT_FOUND = ("NotFound", 404)
    PAYLOAD_TOO_LARGE = ("PayloadTooLarge", 413)
    RESOURCE_EXHAUSTED = ("ResourceExhausted", 429)
    INTERNAL = ("Internal", 500)
    SERVICE_UNAVAILABLE = ("ServiceUnavailable", 503)
    # Not sent to clients: the label counted when a model server answers with a non-200 status.
    MODEL_SERVER_ERROR = ("ModelServerError", 502)

    def __init__(self, label: str, http_status: int) -> None:
        self.label = label
        self.http_status = http_status


class EppError(Exception):
    """An error with an upstream code; ``str()`` is the body the client sees.

    ``headers`` go on the error response (flow control's ``x-llm-d-request-dropped-reason``).
    """

    def __init__(self, code: ErrorCode, msg: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.headers = headers

    def __str__(self) -> str:
        return f"inference error: {self.code.label} - {self.msg}"

    def __repr__(self) -> str:
        return f"EppError({self.code.label}, {self.msg!r})"
