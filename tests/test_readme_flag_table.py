"""README.md's flag tables are exactly what ``scripts/flag_table.py`` renders from ``epp serve``'s parser."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _flag_table() -> ModuleType:
    spec = importlib.util.spec_from_file_location("flag_table", ROOT / "scripts" / "flag_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_flag_table_is_generated_from_the_parser() -> None:
    flag_table = _flag_table()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert flag_table.BEGIN in readme and flag_table.END in readme, "README.md lost the flag-table markers"
    assert flag_table.with_table(readme) == readme, (
        "README.md's flag table is out of date: run .venv/bin/python scripts/flag_table.py"
    )


def test_every_flag_has_a_row_with_its_default() -> None:
    table = _flag_table().render()
    for row in ("| `--pool-name` | — |", "| `--grpc-port` | `9002` |", "| `--secure-serving` | true |"):
        assert row in table
    assert "| `-v` / `--v` | `2` |" in table
