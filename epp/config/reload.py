"""Live configuration: watch ``--config-file``, validate a changed file, swap it in atomically.

The request path reads ``holder.current`` once per request, so a swap (one reference assignment
on the event loop) lands between requests and never mid-cycle. A file that fails to load keeps
the last good configuration; the reason goes to the log and ``epp_config_reloads_total{result=
"rejected"}``/``epp_config_last_reload_successful``. Polling by content hash (not mtime alone)
also catches Kubernetes ConfigMap updates, which swap a ``..data`` symlink under the mount.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from epp.clock import Clock
from epp.config.config_series import ConfigSeries
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.metrics import EppMetrics

__all__ = ["ConfigHolder", "ConfigWatcher"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class ConfigHolder(Generic[T]):
    """The current configuration; ``current`` is replaced, never mutated."""

    def __init__(self, initial: T) -> None:
        self.current = initial
        self.generation = 1

    def get(self) -> T:
        return self.current

    def swap(self, new: T) -> None:
        self.current = new
        self.generation += 1


class ConfigWatcher(Generic[T]):
    """Polls a file and reloads it through ``load`` (text → config; raises on invalid input)."""

    def __init__(
        self,
        path: str,
        holder: ConfigHolder[T],
        load: Callable[[str], T],
        *,
        clock: Clock,
        metrics: EppMetrics,
        interval: float = 1.0,
        on_swap: Callable[[T, T], None] | None = None,
        prepare: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.holder = holder
        self._load = load
        self._clock = clock
        self._metrics = metrics.series(ConfigSeries)
        self.interval = interval
        self._on_swap = on_swap
        self._prepare = prepare
        """Blocking work a changed text needs before ``load`` (plugin imports), run in a thread."""
        self._digest = ""
        self._task: asyncio.Task[None] | None = None
        self.last_error = ""

    async def start(self, initial_text: str) -> None:
        """Remember the text the holder was built from and start polling."""
        self._digest = hashlib.sha256(initial_text.encode()).hexdigest()
        self._metrics.last_reload_success.set(1)
        self._task = start_guarded(self._run(), f"config-watch:{self.path.name}", forever=True)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def check_now(self) -> bool | None:
        """Reload if the file changed: True = swapped, False = rejected, None = unchanged."""
        try:
            text = await asyncio.to_thread(self.path.read_text)
        except OSError as e:
            return self._reject(f"cannot read {self.path}: {e}", digest=f"oserror:{e}")
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest == self._digest:
            return None
        try:
            if self._prepare is not None:
                await asyncio.to_thread(self._prepare, text)
            new = self._load(text)
        except Exception as e:  # any loader failure keeps the last good config
            return self._reject(str(e), digest=digest)
        old = self.holder.current
        self.holder.swap(new)
        self._digest = digest
        self.last_error = ""
        self._metrics.reloads.labels(result="success").inc()
        self._metrics.last_reload_success.set(1)
        log.info("configuration reloaded", extra={"path": str(self.path), "generation": self.holder.generation})
        if self._on_swap is not None:
            self._on_swap(old, new)
        return True

    def _reject(self, reason: str, *, digest: str) -> bool | None:
        if digest == self._digest:
            return None  # the same unreadable file: already reported
        self._digest = digest
        self.last_error = reason
        self._metrics.reloads.labels(result="rejected").inc()
        self._metrics.last_reload_success.set(0)
        log.error(
            "configuration rejected, keeping the last good one",
            extra={"path": str(self.path), "reason": reason},
        )
        return False

    async def _run(self) -> None:
        while True:
            await self._clock.sleep(self.interval)
            try:
                await self.check_now()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("configuration watch failed", extra={"path": str(self.path)})
