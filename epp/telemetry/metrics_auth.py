"""Upstream's guard on the metrics port: bearer token → TokenReview → SubjectAccessReview.

With ``--metrics-endpoint-auth`` (on by default) every handler of the metrics port asks this
first, as controller-runtime's ``filters.WithAuthenticationAndAuthorization`` wraps them
upstream. The token is reviewed by the API server (TokenReview, no audiences: the API server's
own); the user it names must then be allowed the request's lower-cased method as verb on its path
as non-resource URL (SubjectAccessReview), e.g. ``get`` on ``/metrics``. Answers, status and
text, are upstream's:

==========================================  ======  ========================================
no ``Authorization: Bearer <token>``        401     ``Unauthorized``
token rejected, or the TokenReview failed   500     ``Authentication failed``
the SubjectAccessReview does not allow it   403     ``Authorization denied for user <name>``
the SubjectAccessReview failed              500     ``Authorization for user <name> failed``
==========================================  ======  ========================================

A rejected token answers 500 rather than 401 because upstream's bearer-token authenticator
turns a rejection into an error. Caching is upstream's delegating authenticator and authorizer:
a TokenReview answer is kept 1 minute (unless the server reported an error with it), a
SubjectAccessReview allow 5 minutes and a deny 30 seconds; failed calls are never kept. Each
review gives up after 10 seconds, and within them a call that failed for a passing reason (API
server 5xx, 429, unreachable) is tried again with upstream's webhook backoff (0.5 s × 1.5ⁿ,
±20 %, 5 tries). The caches are LRU-bounded and keyed by a SHA-256 of the token, never the token.
Everything runs on the event loop without blocking it. The reviews are created by a
:class:`Reviewer` handed in (the picker's: ``epp.kube.reviews.KubeReviewer``, through the
process's one kr8s ``Api``), so this module, beside the metrics server it guards, knows no client.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from epp.clock import Clock

__all__ = [
    "MetricsAuth",
    "Refusal",
    "ReviewError",
    "ReviewUnavailableError",
    "ReviewedUser",
    "Reviewer",
    "bearer_token",
]

log = logging.getLogger(__name__)

TOKEN_TTL = 60.0
ALLOW_TTL = 300.0
DENY_TTL = 30.0
REVIEW_TIMEOUT = 10.0
RETRY_DELAY, RETRY_FACTOR, RETRY_JITTER, RETRY_TRIES = 0.5, 1.5, 0.2, 5  # k8s webhook.DefaultRetryBackoff
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
JsonObject = dict[str, Any]


class ReviewError(Exception):
    """A review could not be created: the message says why."""


class ReviewUnavailableError(ReviewError):
    """A review failed for a passing reason (API server 5xx, 429, unreachable): worth trying again."""


class Reviewer(Protocol):
    """Creates review objects (``TokenReview``, ``SubjectAccessReview``) and returns the server's answer."""

    async def create(self, group_version: str, plural: str, body: JsonObject) -> JsonObject:
        """POST ``body`` to ``/apis/<group_version>/<plural>``; raises :class:`ReviewError`."""
        ...


@dataclass(frozen=True, slots=True)
class Refusal:
    """The answer instead of the handler's: upstream's status and text (``http.Error`` adds the newline)."""

    status: int
    text: str


@dataclass(frozen=True, slots=True)
class ReviewedUser:
    """Who a token is, as the TokenReview said: what the SubjectAccessReview is asked about."""

    name: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]

    @classmethod
    def from_status(cls, user: Any) -> ReviewedUser:
        user = user if isinstance(user, dict) else {}
        extra = user.get("extra") if isinstance(user.get("extra"), dict) else {}
        return cls(
            str(user.get("username") or ""),
            str(user.get("uid") or ""),
            tuple(str(g) for g in user.get("groups") or ()),
            tuple(sorted((str(k), tuple(str(v) for v in values or ())) for k, values in extra.items())),
        )


def bearer_token(authorization: str) -> str | None:
    """The token of an ``Authorization`` header, parsed as upstream's bearer-token authenticator does.

    The scheme is case-insensitive, the token is the second space-separated field, and an empty
    token is no token.
    """
    parts = authorization.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


class _Entry(Generic[V]):
    __slots__ = ("expires", "value")

    def __init__(self, value: V, expires: float) -> None:
        self.value = value
        self.expires = expires


class _ExpiringCache(Generic[K, V]):
    """At most ``size`` entries, least recently used dropped first, each kept for its own TTL."""

    def __init__(self, size: int, clock: Clock) -> None:
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[K, _Entry[V]] = OrderedDict()

    def get(self, key: K) -> _Entry[V] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self._clock.now():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def put(self, key: K, value: V, ttl: float) -> None:
        self._entries[key] = _Entry(value, self._clock.now() + ttl)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)


class MetricsAuth:
    """Decides each metrics-port request: ``None`` lets it through, a :class:`Refusal` answers it."""

    def __init__(
        self,
        reviewer: Reviewer,
        *,
        clock: Clock,
        cache_size: int = 4096,
        timeout: float = REVIEW_TIMEOUT,
        rng: random.Random | None = None,
    ) -> None:
        self._reviewer = reviewer
        self._clock = clock
        self._timeout = timeout
        self._rng = rng or random.Random()
        self._users: _ExpiringCache[bytes, ReviewedUser | None] = _ExpiringCache(cache_size, clock)
        self._decisions: _ExpiringCache[tuple[ReviewedUser, str, str], bool] = _ExpiringCache(cache_size, clock)

    async def check(self, method: str, path: str, authorization: str) -> Refusal | None:
        token = bearer_token(authorization)
        if token is None:
            return Refusal(401, "Unauthorized")
        try:
            user = await self._authenticate(token)
        except ReviewError as e:
            log.error("Authentication failed", extra={"error": str(e)})
            return Refusal(500, "Authentication failed")
        if user is None:
            log.error("Authentication failed", extra={"error": "invalid bearer token"})
            return Refusal(500, "Authentication failed")
        verb = method.lower()
        try:
            allowed = await self._authorize(user, verb, path)
        except ReviewError as e:
            message = f"Authorization for user {user.name} failed"
            log.error(message, extra={"error": str(e)})
            return Refusal(500, message)
        if not allowed:
            log.debug("Authorization denied", extra={"user": user.name, "verb": verb, "path": path})
            return Refusal(403, f"Authorization denied for user {user.name}")
        return None

    async def _authenticate(self, token: str) -> ReviewedUser | None:
        key = hashlib.sha256(token.encode()).digest()
        cached = self._users.get(key)
        if cached is not None:
            return cached.value
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = await self._review("authentication.k8s.io/v1", "tokenreviews", review)
        user = ReviewedUser.from_status(status.get("user")) if status.get("authenticated") is True else None
        if user is not None or not status.get("error"):  # upstream keeps rejections only without an error
            self._users.put(key, user, TOKEN_TTL)
        return user

    async def _authorize(self, user: ReviewedUser, verb: str, path: str) -> bool:
        key = (user, verb, path)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached.value
        spec: JsonObject = {
            "nonResourceAttributes": {"path": path, "verb": verb},
            "user": user.name,
            "uid": user.uid,
            "groups": list(user.groups),
            "extra": {k: list(v) for k, v in user.extra},
        }
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        status = await self._review("authorization.k8s.io/v1", "subjectaccessreviews", review)
        allowed = status.get("allowed") is True
        self._decisions.put(key, allowed, ALLOW_TTL if allowed else DENY_TTL)
        return allowed

    async def _review(self, group_version: str, plural: str, body: JsonObject) -> JsonObject:
        """POST a review and return its ``status``, retrying passing failures within the timeout."""
        try:
            async with asyncio.timeout(self._timeout):
                answer = await self._post_with_retries(group_version, plural, body)
        except TimeoutError:
            raise ReviewUnavailableError(f"POST {group_version}/{plural}: no answer within {self._timeout}s") from None
        status = answer.get("status")
        return status if isinstance(status, dict) else {}

    async def _post_with_retries(self, group_version: str, plural: str, body: JsonObject) -> JsonObject:
        delay, attempt = RETRY_DELAY, 1
        while True:
            try:
                return await self._reviewer.create(group_version, plural, body)
            except ReviewUnavailableError:
                if attempt == RETRY_TRIES:
                    raise
            await self._clock.sleep(delay * (1 + RETRY_JITTER * self._rng.random()))
            delay, attempt = delay * RETRY_FACTOR, attempt + 1
