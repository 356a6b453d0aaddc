"""The upstream charts' rendered ``epp`` argument lists (``tests/deploy/chart_args/*.yaml``), read for tests.

Each file holds what one chart, with its default values, puts into the picker's pod: ``args``
(verbatim, quotes inside arguments included), the ``env`` the downward API resolves, and the
``config`` its ConfigMap mounts at ``/config``. The file's comment names the template and commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["CHART_ARGS_DIR", "ChartArgs", "chart_args", "chart_names"]

CHART_ARGS_DIR = Path(__file__).parent / "deploy" / "chart_args"


@dataclass(frozen=True)
class ChartArgs:
    name: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    config: str

    def value(self, flag: str) -> str:
        """The argument after ``flag`` (``--pool-name``)."""
        return self.args[self.args.index(flag) + 1]


def chart_names() -> list[str]:
    return sorted(p.stem for p in CHART_ARGS_DIR.glob("*.yaml"))


def chart_args(name: str) -> ChartArgs:
    data = yaml.safe_load((CHART_ARGS_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    return ChartArgs(name, tuple(data["args"]), dict(data["env"]), data["config"])
