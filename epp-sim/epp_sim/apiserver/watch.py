"""Watch fan-out: the bounded event history, subscriptions, and 410 Gone.

Every committed change becomes an ``Event`` with the server-wide resourceVersion it produced.
The log keeps the last ``history_limit`` events; a watch from resourceVersion ``rv`` replays the
events after ``rv`` and then follows live ones, or fails with 410 when events it needs were
already dropped. Selector-filtered watches see the transitions the real server sends: an object
that starts matching arrives as ADDED, one that stops matching as DELETED. A store restored from
a data directory goes on from its saved counter with no history (``restore``), so a watch from
before the restart gets 410 like one after an etcd compaction.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.kinds import Obj, ResourceType

__all__ = ["Event", "EventLog", "Watch"]

Matcher = Callable[[Obj], bool]


@dataclass(slots=True)
class Event:
    """One change: ``type`` is ADDED, MODIFIED or DELETED; ``object`` is read-only after commit."""

    type: str
    rt: ResourceType
    object: Obj
    rv: int
    old: Obj | None = None
    _encoded: dict[str, bytes] = field(default_factory=dict, repr=False)

    def encoded(self, event_type: str, api_version: str) -> bytes:
        """The watch line for this event as served at ``api_version``; serialized once per version."""
        cache_key = f"{event_type} {api_version}"
        line = self._encoded.get(cache_key)
        if line is None:
            body = (
                self.object
                if self.object.get("apiVersion") == api_version
                else {**self.object, "apiVersion": api_version}
            )
            line = json.dumps({"type": event_type, "object": body}, separators=(",", ":")).encode() + b"\n"
            self._encoded[cache_key] = line
        return line


class Watch:
    """One subscription to a resource: iterate it for ``(event_type, Event)``; ends when closed or dropped."""

    def __init__(self, log: EventLog, key: tuple[str, str], namespace: str | None, match: Matcher | None) -> None:
        self._log = log
        self.key = key
        self._namespace = namespace
        self._match = match
        self._queue: asyncio.Queue[tuple[str, Event] | None] = asyncio.Queue()
        self.closed = False

    def matches(self, o: Obj | None) -> bool:
        if o is None:
            return False
        if self._namespace is not None and o.get("metadata", {}).get("namespace") != self._namespace:
            return False
        return self._match is None or self._match(o)

    def offer(self, event: Event) -> None:
        """Queue ``event`` translated for this watch's filter (or drop it)."""
        if self.closed:
            return
        now = self.matches(event.object)
        if event.type == "MODIFIED":
            before = self.matches(event.old)
            if now and not before:
                self._queue.put_nowait(("ADDED", event))
            elif before and not now:
                self._queue.put_nowait(("DELETED", event))
            elif now:
                self._queue.put_nowait(("MODIFIED", event))
        elif now:
            self._queue.put_nowait((event.type, event))

    def mark(self, event: Event) -> None:
        """Queue ``event`` as is, past the filter (the initial-events-end bookmark)."""
        if not self.closed:
            self._queue.put_nowait((event.type, event))

    @property
    def idle(self) -> bool:
        """Every committed event has been consumed (a bookmark at the current rv is truthful)."""
        return self._queue.empty()

    def close(self) -> None:
        """End the stream after what is queued; idempotent."""
        if not self.closed:
            self.closed = True
            self._queue.put_nowait(None)
            self._log.forget(self)

    async def next(self) -> tuple[str, Event] | None:
        """The next event, or None when the watch has ended."""
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)
        return item

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> tuple[str, Event]:
        item = await self.next()
        if item is None:
            raise StopAsyncIteration
        return item

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class EventLog:
    """The server-wide resourceVersion counter, bounded history and the set of open watches."""

    def __init__(self, history_limit: int) -> None:
        self.rv = 0
        self.compacted_rv = 0
        self._history: deque[Event] = deque()
        self._limit = max(0, history_limit)
        self._watches: dict[tuple[str, str], set[Watch]] = {}

    @property
    def history_limit(self) -> int:
        return self._limit

    @history_limit.setter
    def history_limit(self, value: int) -> None:
        self._limit = max(0, value)
        self._trim()

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def append(self, event: Event) -> None:
        self._history.append(event)
        self._trim()
        for w in list(self._watches.get(event.rt.key, ())):
            w.offer(event)

    def _trim(self) -> None:
        while len(self._history) > self._limit:
            self.compacted_rv = self._history.popleft().rv

    def compact(self) -> None:
        """Forget all history: a watch from any past resourceVersion now gets 410."""
        self._history.clear()
        self.compacted_rv = self.rv

    def restore(self, rv: int) -> None:
        """Go on from a restored counter with no history: a watch from before ``rv`` gets 410."""
        self._history.clear()
        self.rv = self.compacted_rv = rv

    def subscribe(
        self,
        rt: ResourceType,
        *,
        since: int | None,
        initial: Iterable[Event],
        namespace: str | None,
        match: Matcher | None,
        initial_events_end: bool = False,
    ) -> Watch:
        """A watch from ``since`` (replaying history) or, when None, starting with ``initial`` ADDED events.

        ``initial_events_end`` follows the initial events with the BOOKMARK annotated
        ``k8s.io/initial-events-end`` that watch-list clients (``sendInitialEvents=true``) wait for.
        """
        w = Watch(self, rt.key, namespace, match)
        if since is None:
            for e in initial:
                w.offer(e)
            if initial_events_end:
                w.mark(Event("BOOKMARK", rt, _end_bookmark(rt, self.rv), self.rv))
        else:
            if since < self.compacted_rv:
                raise ApiError(410, "Expired", f"too old resource version: {since} ({self.compacted_rv + 1})")
            for e in self._history:
                if e.rv > since and e.rt.key == rt.key:
                    w.offer(e)
        self._watches.setdefault(rt.key, set()).add(w)
        return w

    def forget(self, w: Watch) -> None:
        watches = self._watches.get(w.key)
        if watches is not None:
            watches.discard(w)

    def close_watches(self, key: tuple[str, str] | None = None) -> int:
        """End every open watch (of one resource when ``key`` is given); returns how many."""
        targets = [w for k, ws in self._watches.items() if key is None or k == key for w in ws]
        for w in targets:
            w.close()
        return len(targets)

    def open_watches(self) -> int:
        return sum(len(ws) for ws in self._watches.values())


def _end_bookmark(rt: ResourceType, rv: int) -> Obj:
    return {
        "kind": rt.kind,
        "apiVersion": rt.api_version(),
        "metadata": {"resourceVersion": str(rv), "annotations": {"k8s.io/initial-events-end": "true"}},
    }


def bookmark(rt: ResourceType, version: str, rv: int) -> bytes:
    """A BOOKMARK line: only kind, apiVersion and metadata.resourceVersion."""
    body: dict[str, Any] = {
        "type": "BOOKMARK",
        "object": {"kind": rt.kind, "apiVersion": rt.api_version(version), "metadata": {"resourceVersion": str(rv)}},
    }
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"
