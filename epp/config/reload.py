"""Live configuration: watch ``--config-file`` and hand each changed text to the runtime, which loads and swaps it.

The watcher owns when to reload and how it went, not what a configuration is: its ``apply``
(the runtime's) loads the text off the loop, refuses it by raising, or puts it in force in one
loop step. A file that cannot be read, or whose ``apply`` raised, keeps the last good
configuration and changes nothing else: the reason goes to the log,
``epp_config_reloads_total{result="rejected"}`` and ``epp_config_last_reload_successful``.
:class:`ConfigStatus` is what the epp.v1 Config API reports of it (source, generation, the last
error). Polling by content hash (not mtime alone) also catches Kubernetes ConfigMap updates,
which swap a ``..data`` symlink under the mount.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from epp.clock import Clock
from epp.config.config_series import ConfigSeries
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.metrics import EppMetrics

__all__ = ["ConfigStatus", "ConfigWatcher"]

log = logging.getLogger(__name__)


@dataclass
class ConfigStatus:
    """Where the configuration in force came from and how its reloads went."""

    source: str
    """``--config-file <path>``, ``--config-text`` or ``default``."""
    watched: bool = False
    generation: int = 1
    """1 for the configuration the picker started with, plus one per reload put in force."""
    last_error: str = ""
    """Why the file's last change was refused; empty once a change is in force."""


class ConfigWatcher:
    """Polls a file and hands each changed text to ``apply`` (loads and swaps it; raises to refuse it)."""

    def __init__(
        self,
        path: str,
        apply: Callable[[str], Awaitable[None]],
        status: ConfigStatus,
        *,
        clock: Clock,
        metrics: EppMetrics,
        interval: float = 1.0,
    ) -> None:
        self.path = Path(path)
        self._apply = apply
        self.status = status
        self._clock = clock
        self._metrics = metrics.series(ConfigSeries)
        self.interval = interval
        self._digest = ""
        self._task: asyncio.Task[None] | None = None

    async def start(self, initial_text: str) -> None:
        """Remember the text the configuration in force was loaded from and start polling."""
        self._digest = hashlib.sha256(initial_text.encode()).hexdigest()
        self.status.watched = True
        self._metrics.last_reload_success.set(1)
        self._task = start_guarded(self._run(), f"config-watch:{self.path.name}", forever=True)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def check_now(self) -> bool | None:
        """Reload if the file changed: True = in force, False = refused, None = unchanged."""
        try:
            text = await asyncio.to_thread(self.path.read_text)
        except OSError as e:
            return self._reject(f"cannot read {self.path}: {e}", digest=f"oserror:{e}")
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest == self._digest:
            return None
        try:
            await self._apply(text)
        except Exception as e:  # any load failure or refusal keeps the last good config
            return self._reject(str(e), digest=digest)
        status = self.status
        self._digest = digest
        status.generation += 1
        status.last_error = ""
        self._metrics.reloads.labels(result="success").inc()
        self._metrics.last_reload_success.set(1)
        log.info("configuration reloaded", extra={"path": str(self.path), "generation": status.generation})
        return True

    def _reject(self, reason: str, *, digest: str) -> bool | None:
        if digest == self._digest:
            return None  # the same unreadable file: already reported
        self._digest = digest
        self.status.last_error = reason
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
