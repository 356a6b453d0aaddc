"""Injected faults: latency and error responses for matching requests.

A rule matches a Kubernetes verb (get, list, watch, create, update, patch, delete,
deletecollection; None for any) and a URL path prefix; error rules fire ``times`` times (None:
until cleared) and answer with a ``Status`` of the given code. Dropping watches and restarts
live on ``ApiServer``; this module only decides what a request suffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from epp_sim.apiserver.errors import ApiError

__all__ = ["ErrorRule", "Faults", "LatencyRule", "verb_of"]

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def verb_of(method: str, query: dict[str, str], *, named: bool) -> str:
    """The Kubernetes verb of a request (``named``: the URL addresses one object)."""
    if method == "GET":
        if query.get("watch") in ("1", "true"):
            return "watch"
        return "get" if named else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return method.lower()


@dataclass(slots=True)
class ErrorRule:
    status: int
    verb: str | None = None
    path_prefix: str = ""
    times: int | None = 1
    message: str = "injected error"

    def error(self) -> ApiError:
        return ApiError(self.status, _REASONS.get(self.status, "InternalError"), self.message)


@dataclass(slots=True)
class LatencyRule:
    seconds: float
    verb: str | None = None
    path_prefix: str = ""


class Faults:
    """The active rules; consulted once per request."""

    def __init__(self) -> None:
        self.errors: list[ErrorRule] = []
        self.latencies: list[LatencyRule] = []
        self.errors_served = 0
        """How many requests got an injected error so far (tests wait on it instead of sleeping)."""

    def add_error(self, rule: ErrorRule) -> None:
        if not 400 <= rule.status <= 599:
            raise ValueError(f"injected status must be 4xx or 5xx, got {rule.status}")
        self.errors.append(rule)

    def add_latency(self, rule: LatencyRule) -> None:
        if rule.seconds < 0:
            raise ValueError(f"injected latency must be >= 0, got {rule.seconds}")
        self.latencies.append(rule)

    def clear(self) -> None:
        self.errors.clear()
        self.latencies.clear()

    def delay_for(self, verb: str, path: str) -> float:
        """Total injected latency for this request."""
        return sum(r.seconds for r in self.latencies if _hits(r.verb, r.path_prefix, verb, path))

    def error_for(self, verb: str, path: str) -> ApiError | None:
        """The first matching error rule's error (consuming one of its ``times``), or None."""
        for rule in self.errors:
            if _hits(rule.verb, rule.path_prefix, verb, path):
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times <= 0:
                        self.errors.remove(rule)
                self.errors_served += 1
                return rule.error()
        return None


def _hits(rule_verb: str | None, prefix: str, verb: str, path: str) -> bool:
    return (rule_verb is None or rule_verb == verb) and path.startswith(prefix)
