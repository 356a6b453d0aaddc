"""A code block the docs say is a copy of a file (``<!-- file: path -->`` above it) is that file, byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_COPY = re.compile(r"<!-- file: (?P<path>[^ ]+) -->\n```[a-z]*\n(?P<body>.*?)```", re.DOTALL)
COPIES = [
    (doc, m["path"], m["body"]) for doc in sorted((ROOT / "docs").glob("*.md")) for m in _COPY.finditer(doc.read_text())
]


def test_the_worked_example_of_docs_testing_is_marked_as_a_copy() -> None:
    assert ("testing.md", "hermetic_tests/test_platform_example.py") in {(d.name, p) for d, p, _ in COPIES}


@pytest.mark.parametrize(("doc", "path", "body"), COPIES, ids=[f"{d.name}:{p}" for d, p, _ in COPIES])
def test_doc_copy_matches_the_file(doc: Path, path: str, body: str) -> None:
    assert body == (ROOT / path).read_text(), f"{doc.name} holds an outdated copy of {path}"
