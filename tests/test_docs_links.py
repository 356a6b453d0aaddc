"""Every relative link in README.md and docs/*.md points at a file or folder that exists.

Code moves (``epp/dev`` became ``epp-sim/epp_sim/dev``, say) and the docs' links to it go stale
without anyone noticing. A link here is a markdown ``](target)``, outside code blocks and code
spans; links with a scheme (``https:``, ``mailto:``) and pure ``#anchor`` links are not checked,
and an ``#anchor`` suffix is dropped before the path is looked up.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCED = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+).*?\1", re.DOTALL)
_LINK = re.compile(r"\]\(\s*(?:<(?P<angled>[^>\n]+)>|(?P<bare>[^)\s]+))(?:\s+[\"'(][^)]*)?\s*\)")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _blank(match: re.Match[str]) -> str:
    """The matched code with every character but newlines blanked, so offsets and lines stay put."""
    return re.sub(r"[^\n]", " ", match.group(0))


def relative_links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every relative link in markdown ``text``, anchors stripped."""
    prose = _CODE_SPAN.sub(_blank, _FENCED.sub(_blank, text))
    links = []
    for m in _LINK.finditer(prose):
        target = m["angled"] or m["bare"]
        if target.startswith("#") or _SCHEME.match(target):
            continue
        links.append((prose.count("\n", 0, m.start()) + 1, target.split("#", 1)[0]))
    return links


def _resolve(doc: Path, target: str) -> Path:
    path = unquote(target)
    return ROOT / path.lstrip("/") if path.startswith("/") else doc.parent / path


LINKS = [(doc, line, target) for doc in DOCS for line, target in relative_links(doc.read_text(encoding="utf-8"))]


def test_the_finder_reads_links_as_markdown_does() -> None:
    text = (
        'See [a](docs/a.md#part), [b](<b dir/>) and [c](c.md "title").\n'
        "Not [web](https://example.com/x), [here](#local), `[code](gone.md)` or:\n"
        "```python\nx = y[0](z)  # [block](gone.md)\n```\n"
        "[d](../d.py)\n"
    )
    assert relative_links(text) == [(1, "docs/a.md"), (1, "b dir/"), (1, "c.md"), (6, "../d.py")]


def test_readme_points_at_the_testing_guide() -> None:
    assert any(doc.name == "README.md" and target == "docs/testing.md" for doc, _, target in LINKS)


@pytest.mark.parametrize(("doc", "line", "target"), LINKS, ids=[f"{d.relative_to(ROOT)}:{n}:{t}" for d, n, t in LINKS])
def test_relative_link_target_exists(doc: Path, line: int, target: str) -> None:
    path = _resolve(doc, target)
    assert path.exists(), (
        f"{doc.relative_to(ROOT)}, line {line}: the link ]({target}) points at "
        f"{os.path.relpath(path, ROOT)}, which does not exist"
    )
