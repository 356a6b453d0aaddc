"""``ApiError``: a Kubernetes ``Status`` failure, raised anywhere in the fake API server.

Every failure leaves the server as the real one does, as a ``Status`` body (kind Status,
apiVersion v1, status Failure, reason, code, details), so clients parse it the same way.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ApiError", "already_exists", "conflict", "invalid", "not_found", "status_body"]


class ApiError(Exception):
    """A failure with an HTTP code, a Kubernetes reason and optional ``details``."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        """The ``Status`` object the server answers with."""
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``meta/v1 Status``; ``Success`` for 2xx codes, else ``Failure``."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if 200 <= code < 300 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def _details(plural: str, group: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    """404 as the real server words it: ``pods "x" not found``."""
    return ApiError(404, "NotFound", f'{_qualified(plural, group)} "{name}" not found', _details(plural, group, name))


def already_exists(plural: str, group: str, name: str) -> ApiError:
    """409 AlreadyExists: ``pods "x" already exists``."""
    return ApiError(
        409, "AlreadyExists", f'{_qualified(plural, group)} "{name}" already exists', _details(plural, group, name)
    )


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    """409 Conflict: ``Operation cannot be fulfilled on pods "x": <why>``."""
    msg = f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}'
    return ApiError(409, "Conflict", msg, _details(plural, group, name))


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid with one cause per ``(field, reason, message)``."""
    text = ", ".join(f"{field}: {message}" for field, _, message in causes)
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": reason, "message": message, "field": field} for field, reason, message in causes],
    }
    if group:
        details["group"] = group
    return ApiError(
        422,
        "Invalid",
        f'{kind}.{group} "{name}" is invalid: {text}' if group else f'{kind} "{name}" is invalid: {text}',
        details,
    )
