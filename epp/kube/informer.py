"""List + watch one kind in one namespace, forever, and hand the results to a handler.

The loop is the client-go reflector's, over kr8s's ``call_api``:

1. list (paginated with ``limit``/``continue``) → ``handler.resync(all objects)``;
2. watch from the list's ``resourceVersion`` with bookmarks and a server-side timeout,
   feeding ``ADDED``/``MODIFIED``/``DELETED`` to ``handler.apply`` and tracking the last
   resourceVersion (bookmarks included);
3. when the stream ends, watch again from the last resourceVersion; on ``410 Gone`` (a ``410``
   answer or an ``ERROR`` event) relist; on any other failure wait with capped exponential
   backoff and retry, never touching the handler, so the datastore keeps its last known state.

kr8s's own ``watch`` cannot be used: it sends no ``allowWatchBookmarks``/``timeoutSeconds`` and,
on 410, re-watches from the same stale resourceVersion forever.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from epp.clock import Clock, SystemClock
from epp.kube.client import (
    Api,
    JsonObject,
    KubeApiError,
    KubeError,
    KubeGoneError,
    KubeUnavailableError,
    request_json,
    stream_lines,
)
from epp.kube.resources import ResourceKind
from epp.tasks import cancel_and_wait, start_guarded

__all__ = ["Backoff", "Informer", "InformerHandler", "InformerSettings"]

log = logging.getLogger(__name__)

_QUICK_WATCH_SECONDS = 1.0


class InformerHandler(Protocol):
    """Receives what the informer sees. Synchronous: it only translates and calls the store."""

    def resync(self, objects: Sequence[JsonObject]) -> None:
        """The complete current set (first list, and every relist)."""
        ...

    def apply(self, event: str, obj: JsonObject) -> None:
        """One ``ADDED``, ``MODIFIED`` or ``DELETED`` event."""
        ...


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff with ±``jitter`` so many pickers do not retry in step."""

    initial: float = 0.25
    maximum: float = 15.0
    factor: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum or self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError(f"invalid backoff {self!r}")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return base * (1 + self.jitter * (2 * rng.random() - 1))


@dataclass(frozen=True, slots=True)
class InformerSettings:
    """Timing knobs shared by every informer of a pool (tests shrink them)."""

    backoff: Backoff = field(default_factory=Backoff)
    watch_timeout: int = 300  # minimum timeoutSeconds sent to the server (it ends the stream then)
    request_timeout: float = 30.0  # per list page; also the grace past watch_timeout
    page_size: int = 500
    clock: Clock = field(default_factory=SystemClock)

    def __post_init__(self) -> None:
        if self.watch_timeout < 1 or self.request_timeout <= 0 or self.page_size < 1:
            raise ValueError(f"invalid informer settings {self!r}")


class Informer:
    """One list+watch loop, run as a named task between :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        api: Api,
        kind: ResourceKind,
        handler: InformerHandler,
        *,
        namespace: str,
        field_selector: str = "",
        label_selector: str = "",
        settings: InformerSettings | None = None,
    ) -> None:
        self._api = api
        self._handler = handler
        self.kind = kind
        self._namespace = namespace
        self._selectors = {k: v for k, v in (("fieldSelector", field_selector), ("labelSelector", label_selector)) if v}
        self._settings = settings or InformerSettings()
        self._rng = random.Random()
        self._task: asyncio.Task[None] | None = None
        self._resource_version: str | None = None
        self.name = f"informer:{kind.kind}:{namespace}" + (f":{field_selector}" if field_selector else "")
        self.synced = asyncio.Event()
        """Set once the first list has been handed to the handler; stays set."""
        self.lists = 0
        """How many complete lists were delivered (1 + relists); for logs and tests."""
        self.watches = 0
        """How many watch streams were requested; for logs and tests."""
        self.watching = False
        """True while a watch stream is open (the server accepted it)."""

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark); None until listed."""
        return self._resource_version

    def start(self) -> None:
        """Start the loop as a named task (idempotent)."""
        if self._task is None or self._task.done():
            self._task = start_guarded(self.run(), self.name, forever=True)

    async def stop(self) -> None:
        """Cancel the loop and wait until it has finished."""
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def run(self) -> None:
        """List, then watch; reconnect, relist or back off as needed, until cancelled."""
        attempt = 0
        clock = self._settings.clock
        try:
            while True:
                try:
                    if self._resource_version is None:
                        await self._list()
                    started = clock.now()
                    events = await self._watch()
                    if events == 0 and clock.now() - started < _QUICK_WATCH_SECONDS:
                        # A server that closes watches at once must not make us spin.
                        raise KubeUnavailableError("watch stream closed immediately")
                    attempt = 0
                    continue
                except KubeGoneError as e:
                    log.info("resourceVersion expired; relisting", extra={"informer": self.name, "reason": str(e)})
                    self._resource_version = None
                    if attempt == 0:  # relist at once; a second 410 in a row backs off
                        attempt = 1
                        continue
                    error: Exception = e
                except KubeError as e:
                    error = e
                except Exception as e:  # a handler bug: log it, relist from scratch after a pause
                    log.exception("informer handler failed; will relist", extra={"informer": self.name})
                    self._resource_version = None
                    error = e
                delay = self._settings.backoff.delay(attempt, self._rng)
                attempt += 1
                log.warning(
                    "Kubernetes API call failed; keeping last known state and retrying",
                    extra={"informer": self.name, "error": str(error), "retry_in": round(delay, 3)},
                )
                await clock.sleep(delay)
        finally:
            log.debug("informer stopped", extra={"informer": self.name})

    async def _list(self) -> None:
        """List every object (all pages) and hand the complete set to the handler."""
        params: dict[str, str] = {"limit": str(self._settings.page_size), **self._selectors}
        items: list[JsonObject] = []
        resource_version = ""
        while True:
            try:
                async with asyncio.timeout(self._settings.request_timeout):
                    body = await request_json(
                        self._api,
                        group_version=self.kind.group_version,
                        path=self.kind.plural,
                        namespace=self._namespace,
                        params=params,
                    )
            except TimeoutError as e:
                raise KubeUnavailableError(f"listing {self.kind.plural} timed out") from e
            page = body.get("items") or []
            if not isinstance(page, list):
                raise KubeApiError(f"listing {self.kind.plural}: items is not a list", status=0)
            items.extend(item for item in page if isinstance(item, dict))
            meta: Mapping[str, Any] = body.get("metadata") or {}
            resource_version = str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                break
            params["continue"] = str(token)
        if not resource_version:
            raise KubeApiError(f"listing {self.kind.plural}: no metadata.resourceVersion", status=0)
        self._handler.resync(items)
        self._resource_version = resource_version
        self.lists += 1
        self.synced.set()
        log.debug("listed", extra={"informer": self.name, "count": len(items), "resource_version": resource_version})

    async def _watch(self) -> int:
        """Watch from the last resourceVersion until the stream ends; returns the event count."""
        assert self._resource_version is not None
        # As client-go's reflector: a random timeout in [t, 2t) so informers do not reconnect in step.
        timeout = int(self._settings.watch_timeout * (1 + self._rng.random()))
        params = {
            "watch": "true",
            "resourceVersion": self._resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout),
            **self._selectors,
        }
        self.watches += 1
        count = 0
        try:
            async with asyncio.timeout(timeout + self._settings.request_timeout):
                async with stream_lines(
                    self._api,
                    group_version=self.kind.group_version,
                    path=self.kind.plural,
                    namespace=self._namespace,
                    params=params,
                ) as events:
                    self.watching = True
                    async for event in events:
                        count += 1
                        self._dispatch(event)
        except TimeoutError:
            log.info("watch outlived its timeout; reconnecting", extra={"informer": self.name})
        finally:
            self.watching = False
        return count

    def _dispatch(self, event: JsonObject) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise KubeApiError(f"watch {self.kind.plural}: {kind} event without an object", status=0)
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            message = f"watch {self.kind.plural}: {obj.get('reason') or ''} {obj.get('message') or ''}".strip()
            if code == 410:
                raise KubeGoneError(message)
            if code >= 500 or code in (0, 429):
                raise KubeUnavailableError(f"{message} (code {code})")
            raise KubeApiError(f"{message} (code {code})", status=code)
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._handler.apply(kind, obj)
        elif kind != "BOOKMARK":
            log.warning("ignoring unknown watch event type", extra={"informer": self.name, "type": kind})
            return
        meta = obj.get("metadata")
        if isinstance(meta, dict) and meta.get("resourceVersion"):
            self._resource_version = str(meta["resourceVersion"])
