"""The suites import test modules by basename (pytest's default "prepend" mode), so two test files
with one name in different folders would break collection. Say so clearly instead."""

from __future__ import annotations

import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique() -> None:
    names = collections.Counter(
        p.name
        for folder in ("tests", "hermetic_tests", "epp-sim/tests", "real_engine_tests")
        for p in (ROOT / folder).rglob("*.py")
        if p.name != "conftest.py"
    )
    assert [n for n, count in names.items() if count > 1] == [], "rename one of the clashing test modules"
