"""Whether a Valkey/Redis server is reached, as the parts that use one report it: once per change.

The state sync's link and the precise index on Valkey/Redis both keep going without their server
and say so when it goes and when it comes back, never per failed command. This class holds that
state (``connected``, ``disconnects``, the last error, a callback for the health detail) as a
base of both (``ValkeyLink``, ``RedisBlockIndex``); each logs its own lines when
:meth:`ServerStatus.reached` or :meth:`ServerStatus.unreached` says the news is new.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ServerStatus"]


class ServerStatus:
    """``connected`` (False until the first answer), ``disconnects``, ``last_error``, ``on_change``."""

    def __init__(self) -> None:
        self.connected = False
        self.disconnects = 0
        self.last_error = ""
        self.on_change: Callable[[bool], None] | None = None
        """Told each change of :attr:`connected` (the runtime's health detail)."""
        self._told = False

    def _change(self, connected: bool) -> None:
        self.connected, self._told = connected, True
        if self.on_change is not None:
            self.on_change(connected)

    def reached(self) -> bool:
        """The server answered; True when that is news (it was lost, or never reached before)."""
        if self.connected:
            return False
        self._change(True)
        return True

    def unreached(self, error: BaseException) -> bool:
        """A command failed; True when that is news (it was reached, or nothing was said yet)."""
        self.last_error = f"{type(error).__name__}: {error}"
        if self._told and not self.connected:
            return False
        self._change(False)
        self.disconnects += 1
        return True
