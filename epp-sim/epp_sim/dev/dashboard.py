"""The live per-pod table of ``epp dev``: state, queue, running, KV use, adapters and requests routed.

Formatting is pure (:func:`pod_row`, :func:`render_table`, :func:`render_line`) so it is unit
tested without a terminal; :class:`Dashboard` only samples the rows once a second and writes
them. On a TTY it redraws the table in place with plain ANSI escapes (no curses); otherwise
(piped into a file or CI log) it prints one summary line every few seconds instead.

Rows come from the simulators' ``/_sim/stats`` document (``ModelServer.stats()`` in-process):
``requests`` is what the picker routed there, ``waiting``/``running``/``kv_cache_usage`` the
engine's own state, ``loaded_adapters``/``resident_adapters`` the LoRA slots. A pod whose model
is still loading has no simulator yet: its row has a state such as ``Loading 3s`` and zeros. An
optional status line (``epp dev --autoscale``: the autoscaler's last decision) follows the table.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["Dashboard", "PodRow", "pod_row", "render_line", "render_table"]

_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
_RESET = "\x1b[0m"
_BAR_WIDTH = 10
_HEADERS = ("POD", "IP", "STATE", "QUEUE", "RUNNING", "KV", "", "ADAPTERS", "ROUTED", "REQ/S")


@dataclass(frozen=True, slots=True)
class PodRow:
    """One pod's line; ``adapters`` lists loaded adapters, then loading ones suffixed with ``*``."""

    name: str
    ip: str
    waiting: int
    running: int
    kv_cache_usage: float
    adapters: tuple[str, ...]
    routed: int
    state: str = "Ready"


def pod_row(name: str, ip: str, stats: Mapping[str, Any], *, state: str = "Ready") -> PodRow:
    """A row from a simulator's ``/_sim/stats`` document (``{}`` for a pod without one yet)."""
    loaded = [str(a) for a in stats.get("loaded_adapters") or ()]
    loading = [f"{a}*" for a in stats.get("resident_adapters") or () if a not in loaded]
    return PodRow(
        name=name,
        ip=ip,
        waiting=int(stats.get("waiting", 0)),
        running=int(stats.get("running", 0)),
        kv_cache_usage=float(stats.get("kv_cache_usage", 0.0)),
        adapters=(*loaded, *loading),
        routed=int(stats.get("requests", 0)),
        state=state,
    )


def _bar(fraction: float) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * _BAR_WIDTH)
    return "█" * filled + "·" * (_BAR_WIDTH - filled)


def render_table(
    rows: Sequence[PodRow],
    *,
    rates: Mapping[str, float] | None = None,
    title: str = "",
    status: str = "",
    ansi: bool = False,
) -> str:
    """The table as text (a trailing newline per line); ``rates`` are requests/s by pod name.

    ``status`` lines follow the totals. With ``ansi`` the title and header are bold and the totals
    line dim; the layout is identical.
    """
    rates = rates or {}
    total = sum(r.routed for r in rows)
    cells = [
        (
            r.name,
            r.ip,
            r.state,
            str(r.waiting),
            str(r.running),
            f"{r.kv_cache_usage * 100:.1f}%",
            _bar(r.kv_cache_usage),
            ", ".join(r.adapters) or "-",
            f"{r.routed} ({r.routed * 100 / total:.0f}%)" if total else str(r.routed),
            f"{rates.get(r.name, 0.0):.1f}",
        )
        for r in rows
    ]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(_HEADERS)]
    numeric = {3, 4, 5, 8, 9}

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if i in numeric else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    bold, dim, reset = (_BOLD, _DIM, _RESET) if ansi else ("", "", "")
    out = [f"{bold}{title}{reset}"] if title else []
    out.append(f"{bold}{line(_HEADERS)}{reset}")
    out.extend(line(c) for c in cells)
    queued = sum(r.waiting for r in rows)
    running = sum(r.running for r in rows)
    out.append(
        f"{dim}{len(rows)} pods · {queued} queued · {running} running · {total} routed · "
        f"{sum(rates.values()):.1f} req/s{reset}"
    )
    out.extend(status.splitlines())
    return "".join(f"{text}\n" for text in out)


def render_line(rows: Sequence[PodRow]) -> str:
    """One compact line for logs: ``name q=… run=… kv=…% routed=…`` per pod (state if not Ready)."""
    return " | ".join(
        f"{r.name}{'' if r.state == 'Ready' else f' [{r.state}]'} q={r.waiting} run={r.running} "
        f"kv={r.kv_cache_usage * 100:.0f}% lora={','.join(r.adapters) or '-'} routed={r.routed}"
        for r in rows
    )


class Dashboard:
    """Samples ``rows()`` every ``interval`` seconds and draws them on ``out`` until cancelled.

    ``tty`` (default: ``out.isatty()``) selects the in-place table; otherwise a summary line is
    printed every ``plain_interval`` seconds, and only when something changed. ``status`` (if
    given) is sampled with the rows and shown under the table (on a TTY only: in a log the notes
    already say it).
    """

    def __init__(
        self,
        rows: Callable[[], Sequence[PodRow]],
        *,
        out: TextIO | None = None,
        title: str = "",
        status: Callable[[], str] | None = None,
        interval: float = 1.0,
        plain_interval: float = 5.0,
        tty: bool | None = None,
    ) -> None:
        if interval <= 0 or plain_interval <= 0:
            raise ValueError(f"intervals must be positive, got {interval} and {plain_interval}")
        self._rows = rows
        self._out = out if out is not None else sys.stdout
        self._title = title
        self._status = status
        self._tty = self._out.isatty() if tty is None else tty
        self._interval = interval if self._tty else plain_interval
        self._last_routed: dict[str, int] = {}
        self._frame = ""  # the table drawn last (TTY), or the line printed last

    def frame(self) -> str:
        """Sample once and return what would be drawn (updates the per-pod rates)."""
        rows = self._rows()
        rates = {r.name: max(0, r.routed - self._last_routed.get(r.name, r.routed)) / self._interval for r in rows}
        self._last_routed = {r.name: r.routed for r in rows}
        if self._tty:
            status = self._status() if self._status is not None else ""
            return render_table(rows, rates=rates, title=self._title, status=status, ansi=True)
        return render_line(rows)

    def draw(self) -> None:
        """Sample and write one frame: redraw the table in place, or print a line if it changed."""
        text = self.frame()
        if self._tty:
            self._erase()
            self._out.write(text)
            self._frame = text
        elif text != self._frame:
            self._out.write(f"[epp dev] {text}\n")
            self._frame = text
        self._out.flush()

    def note(self, text: str) -> None:
        """Write ``text`` above the live table, which is redrawn below it as it was."""
        self._erase()
        self._out.write(text if text.endswith("\n") else text + "\n")
        if self._tty:
            self._out.write(self._frame)
        self._out.flush()

    def _erase(self) -> None:
        """Cursor to the start of the table drawn last, and clear to the end of the screen."""
        lines = self._frame.count("\n") if self._tty else 0
        if lines:
            self._out.write(f"\x1b[{lines}F\x1b[J")

    async def run(self) -> None:
        """Draw until cancelled."""
        while True:
            self.draw()
            await asyncio.sleep(self._interval)
