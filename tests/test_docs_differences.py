"""docs/differences.md gathers every documented difference from upstream, and its links land.

A section of the docs that says "Differs:" documents a difference from GIE or the llm-d router;
the page must link to that section, so an operator reading the one page sees them all. Every
``file.md#anchor`` link on the page must name a heading that exists (GitHub's anchor rules), so
a renamed section cannot leave the page pointing nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGE = DOCS / "differences.md"

_FENCED = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1", re.MULTILINE | re.DOTALL)
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*$", re.MULTILINE)
_LINK = re.compile(r"\]\((?P<file>[\w.-]+\.md)?#(?P<anchor>[\w-]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def sections(text: str) -> list[tuple[str, str]]:
    """(anchor, body) of each heading in markdown ``text``, fenced code blanked so ``#`` lines stay code."""
    prose = _FENCED.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    heads = list(_HEADING.finditer(prose))
    return [
        (anchor(h.group(2)), prose[h.end() : heads[i + 1].start() if i + 1 < len(heads) else len(prose)])
        for i, h in enumerate(heads)
    ]


def _links() -> set[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    return {(m["file"] or PAGE.name, m["anchor"]) for m in _LINK.finditer(text)}


def test_anchor_follows_githubs_rules() -> None:
    assert anchor("The v0.3 legacy tree") == "the-v03-legacy-tree"
    assert anchor("llm-d router names: API groups, headers, Lease, metrics") == (
        "llm-d-router-names-api-groups-headers-lease-metrics"
    )
    assert anchor("`/metrics`") == "metrics"
    assert anchor("Request control (the pool pipeline)") == "request-control-the-pool-pipeline"


def test_sections_ignore_hashes_in_code_blocks() -> None:
    text = "# Top\nDiffers: a\n```yaml\n# not a heading\n```\n## Next\nb\n"
    assert [a for a, _ in sections(text)] == ["top", "next"]
    assert "Differs: a" in sections(text)[0][1]


DIFFERING = [
    (doc.name, name)
    for doc in sorted(DOCS.glob("*.md"))
    if doc != PAGE
    for name, body in sections(doc.read_text(encoding="utf-8"))
    if "Differs:" in body
]


def test_some_sections_document_differences() -> None:
    assert DIFFERING, "no section says 'Differs:'; the completeness test below would check nothing"


@pytest.mark.parametrize(("doc", "section"), DIFFERING, ids=[f"{d}#{s}" for d, s in DIFFERING])
def test_every_documented_difference_is_linked_from_the_page(doc: str, section: str) -> None:
    assert (doc, section) in _links(), f"docs/{doc}#{section} says 'Differs:' but differences.md does not link it"


@pytest.mark.parametrize(("doc", "section"), sorted(_links()), ids=lambda v: str(v))
def test_every_link_on_the_page_names_a_heading(doc: str, section: str) -> None:
    target = DOCS / doc
    assert target.exists(), f"differences.md links {doc}, which is not in docs/"
    anchors = {name for name, _ in sections(target.read_text(encoding="utf-8"))}
    assert section in anchors, f"differences.md links {doc}#{section}: no such heading"
