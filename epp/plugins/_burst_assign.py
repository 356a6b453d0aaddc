"""The joint assignment of one burst window (``burst-prefix-cache-producer``): which replica each request goes to.

Upstream's algorithm (``dataproducer/burstprefix/assign.go``), pure, over the window's entries:

1. requests are grouped by their whole prompt prefix (equal chained block hashes); a request
   without blocks is never placed;
2. a group of two or more is a placement unit; a single request is one only when
   ``min_colocate`` > 0 and it shares at least that many leading blocks with another request of
   the window;
3. groups are placed before singles, each tier longest prefix first; a unit's first replica is
   the one holding the longest shared prefix (at least ``min_colocate`` blocks) among those under
   the unit's per-replica cap (``max_per_replica``, -1: none) and under their fair share of the
   window (``ceil(total / replicas)``), else the least loaded; a unit larger than the cap spills
   to the next least loaded replicas; ties go to fewer running requests, then the lower name;
4. load is counted in requests, or (``by_tokens``) in blocks, a unit charging each replica it
   lands on only the blocks that replica does not already hold from the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from epp.framework.endpoint import EndpointState

__all__ = ["UNLIMITED", "Entry", "assign"]

UNLIMITED = -1


@dataclass(slots=True)
class Entry:
    """One request of the window: its block hashes, its candidates, and (after :func:`assign`) its replica."""

    hashes: Sequence[int]
    candidates: Sequence[EndpointState]
    assigned: EndpointState | None = field(default=None)


class _WindowIndex:
    """Which replicas hold each block placed so far in the window (a whole prefix at a time)."""

    __slots__ = ("_holders",)

    def __init__(self) -> None:
        self._holders: dict[int, set[str]] = {}

    def add(self, hashes: Sequence[int], replica: str) -> None:
        for h in hashes:
            self._holders.setdefault(h, set()).add(replica)

    def longest_prefix(self, hashes: Sequence[int]) -> dict[str, int]:
        """Per replica, the leading blocks it holds (a block held implies the blocks before it)."""
        found: dict[str, int] = {}
        for h in hashes:
            holders = self._holders.get(h)
            if not holders:
                break
            for replica in holders:
                found[replica] = found.get(replica, 0) + 1
        return found


@dataclass(slots=True)
class _Placement:
    replicas: Sequence[EndpointState]
    cap: int
    min_colocate: int
    fair_share: int
    by_tokens: bool
    load: dict[str, int] = field(default_factory=dict)
    index: _WindowIndex = field(default_factory=_WindowIndex)

    def _before(self, a: EndpointState, b: EndpointState) -> bool:
        """Replica ``a`` is preferred over ``b``: less window load, then fewer running requests, then name."""
        ka, kb = a.endpoint.key, b.endpoint.key
        la, lb = self.load.get(ka, 0), self.load.get(kb, 0)
        if la != lb:
            return la < lb
        ra, rb = a.metrics.running, b.metrics.running
        if ra != rb:
            return ra < rb
        return ka < kb

    def _least_loaded(self, per_replica: dict[str, int]) -> EndpointState:
        open_ = [r for r in self.replicas if self.cap == UNLIMITED or per_replica.get(r.endpoint.key, 0) < self.cap]
        best = None
        for replica in open_ or self.replicas:
            if best is None or self._before(replica, best):
                best = replica
        assert best is not None  # replicas is never empty here
        return best

    def _pick(self, per_replica: dict[str, int], matches: dict[str, int], prefer_match: bool) -> EndpointState:
        if prefer_match:
            best: EndpointState | None = None
            best_match = 0
            for replica in self.replicas:
                key = replica.endpoint.key
                if self.cap != UNLIMITED and per_replica.get(key, 0) >= self.cap:
                    continue
                if self.load.get(key, 0) >= self.fair_share:
                    continue
                m = matches.get(key, 0)
                if m < self.min_colocate:
                    continue
                if best is None or m > best_match or (m == best_match and self._before(replica, best)):
                    best, best_match = replica, m
            if best is not None:
                return best
        return self._least_loaded(per_replica)

    def place(self, members: list[Entry], cost: int) -> None:
        hashes = members[0].hashes
        prefer_match = self.min_colocate > 0
        matches = self.index.longest_prefix(hashes) if prefer_match or self.by_tokens else {}
        per_replica: dict[str, int] = {}
        i = 0
        while i < len(members):
            target = self._pick(per_replica, matches, prefer_match)
            key = target.endpoint.key
            run = len(members) - i
            if self.cap != UNLIMITED:
                run = min(run, max(self.cap - per_replica.get(key, 0), 1))
            for member in members[i : i + run]:
                member.assigned = target
            first_touch = key not in per_replica
            per_replica[key] = per_replica.get(key, 0) + run
            if not self.by_tokens:
                self.load[key] = self.load.get(key, 0) + run
            elif first_touch:
                self.load[key] = self.load.get(key, 0) + max(cost - matches.get(key, 0), 0)
            i += run
            prefer_match = False  # only the unit's first replica gets the prefix preference
        for member in members:
            if member.assigned is not None:
                self.index.add(hashes, member.assigned.endpoint.key)


def _shared(groups: dict[tuple[int, ...], list[Entry]], min_colocate: int) -> set[tuple[int, ...]]:
    """Groups sharing at least ``min_colocate`` leading blocks with another request of the window."""
    if min_colocate <= 0:
        return set()
    count: dict[tuple[int, ...], int] = {}
    head_of: dict[tuple[int, ...], tuple[int, ...]] = {}
    for key, members in groups.items():
        if len(key) < min_colocate:
            continue
        head = key[:min_colocate]
        head_of[key] = head
        count[head] = count.get(head, 0) + len(members)
    return {key for key, head in head_of.items() if count[head] >= 2}


def assign(entries: Sequence[Entry], *, max_per_replica: int, min_colocate: int, by_tokens: bool) -> None:
    """Set ``assigned`` on the entries that get an affinity; the others keep None."""
    groups: dict[tuple[int, ...], list[Entry]] = {}
    replicas: Sequence[EndpointState] = ()
    for entry in entries:
        if not entry.hashes:
            continue
        groups.setdefault(tuple(entry.hashes), []).append(entry)
        if not replicas:
            replicas = entry.candidates
    if not replicas:
        return
    shared = _shared(groups, min_colocate)
    units = [k for k, members in groups.items() if len(members) >= 2]
    singles = [k for k, members in groups.items() if len(members) < 2 and k in shared]
    if not units and not singles:
        return
    units.sort(key=len, reverse=True)  # stable: longest prefix first, window order among equals
    singles.sort(key=len, reverse=True)
    total = sum(len(k) if by_tokens else len(groups[k]) for k in (*units, *singles))
    placement = _Placement(
        replicas,
        cap=max_per_replica,
        min_colocate=min_colocate,
        fair_share=-(-total // len(replicas)),
        by_tokens=by_tokens,
    )
    for key in (*units, *singles):
        placement.place(groups[key], len(key))
