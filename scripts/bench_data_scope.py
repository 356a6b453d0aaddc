#!/usr/bin/env python3
"""Microbenchmark: what holding a plugin to its data declarations costs (``DataScope.get`` / ``put``).

Each round times a scoped read and write of a declared key against the bare attribute-store
access it guards (``request.attributes``), interleaved, and prints the best round of each in ns
and the difference; docs/scheduling.md ("Data declarations") quotes the numbers.
Usage: ``.venv/bin/python scripts/bench_data_scope.py [--rounds N] [--iterations N]``.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

from epp.framework.data import DataScope
from epp.framework.data_keys import PREFIX_CACHE_MATCH_INFO
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest


def cases() -> dict[str, Callable[[], object]]:
    key = PREFIX_CACHE_MATCH_INFO
    declared = frozenset({key.id})
    scope = DataScope(TypedName("bench", "bench"), readable=declared, writable=declared, kinds="Scorer")
    request = InferenceRequest(request_id="r")
    store = request.attributes
    store[key.id] = object()

    def read_bare() -> object:
        return store.get(key.id)

    def read_scoped() -> object:
        return scope.get(request, key)

    def write_bare() -> None:
        store[key.id] = 1

    def write_scoped() -> None:
        scope.put(request, key, 1)

    return {
        "read, bare": read_bare,
        "read, scoped": read_scoped,
        "write, bare": write_bare,
        "write, scoped": write_scoped,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=200_000)
    args = parser.parse_args()
    timed = cases()
    best = dict.fromkeys(timed, float("inf"))
    for _ in range(args.rounds):
        for name, fn in timed.items():
            best[name] = min(best[name], timeit.timeit(fn, number=args.iterations) / args.iterations)
    for name, seconds in best.items():
        print(f"{name:14s} {seconds * 1e9:7.0f} ns")
    for access in ("read", "write"):
        scoped, bare = best[f"{access}, scoped"], best[f"{access}, bare"]
        print(f"{access}: the scope adds {(scoped - bare) * 1e9:.0f} ns ({scoped / bare:.1f}x the bare access)")


if __name__ == "__main__":
    main()
