"""Reading a plugin's ``parameters`` mapping: typed getters that name the field and the bad value.

Shared by every plugin factory, in-tree or installed (it is part of :mod:`epp.plugin_api`), so
every plugin validates the same way: unknown keys are an error (a misspelt option must not
silently fall back to its default), numbers are range-checked and durations accept Go's
``time.ParseDuration`` syntax (``"200ms"``, ``"1.5s"``, ``"1m30s"``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from epp.durations import parse_duration
from epp.framework.plugin import PluginConfigError

__all__ = ["Params", "parse_duration"]


class Params:
    """Typed access to one plugin's parameters; call :meth:`done` last to reject unknown keys."""

    def __init__(self, plugin_type: str, raw: Mapping[str, Any] | None, *, where: str = "") -> None:
        """``where``: the path errors name (default ``<plugin_type>.parameters``), for nested mappings."""
        self._where = where or f"{plugin_type}.parameters"
        self._raw: Mapping[str, Any] = raw if raw is not None else {}
        if not isinstance(self._raw, Mapping):
            raise PluginConfigError(f"{self._where}: must be a mapping, got {raw!r}")
        self._seen: set[str] = set()

    def _error(self, key: str, what: str, value: Any) -> PluginConfigError:
        return PluginConfigError(f"{self._where}.{key}: {what}, got {value!r}")

    def _get(self, key: str) -> Any:
        self._seen.add(key)
        return self._raw.get(key)

    def integer(self, key: str, default: int, *, minimum: int | None = None) -> int:
        """An integer (not a bool), at least ``minimum``; ``default`` when absent."""
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._error(key, "must be an integer", value)
        if minimum is not None and value < minimum:
            raise self._error(key, f"must be >= {minimum}", value)
        return value

    def number(
        self,
        key: str,
        default: float,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
        exclusive_minimum: bool = False,
    ) -> float:
        """A finite number within the bounds (``exclusive_minimum``: above ``minimum``); ``default`` when absent."""
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self._error(key, "must be a number", value)
        number = float(value)
        if minimum is not None and (number <= minimum if exclusive_minimum else number < minimum):
            raise self._error(key, f"must be {'>' if exclusive_minimum else '>='} {minimum}", value)
        if maximum is not None and number > maximum:
            raise self._error(key, f"must be <= {maximum}", value)
        return number

    def boolean(self, key: str, default: bool) -> bool:
        """A boolean; ``default`` when absent."""
        value = self.optional_boolean(key)
        return default if value is None else value

    def optional_boolean(self, key: str) -> bool | None:
        """A boolean, or None when absent (for settings something else defaults)."""
        value = self._get(key)
        if value is not None and not isinstance(value, bool):
            raise self._error(key, "must be a boolean", value)
        return value

    def string(self, key: str, default: str) -> str:
        """A non-empty string."""
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, str) or not value.strip():
            raise self._error(key, "must be a non-empty string", value)
        return value

    def text(self, key: str) -> str | None:
        """Any string, empty included (upstream reads "" as unset for some keys); None when absent."""
        value = self._get(key)
        if value is not None and not isinstance(value, str):
            raise self._error(key, "must be a string", value)
        return value

    def strings(self, key: str) -> list[str] | None:
        """A list of strings; None when absent."""
        value = self._get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._error(key, "must be a list of strings", value)
        return list(value)

    def string_map(self, key: str) -> dict[str, str] | None:
        """A mapping of strings to strings; None when absent."""
        value = self._get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self._error(key, "must be a mapping of strings to strings", value)
        return dict(value)

    def mappings(self, key: str) -> list[Params]:
        """A list of mappings (empty when absent), each as its own :class:`Params` named ``key[i]``."""
        value = self._get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._error(key, "must be a list", value)
        return [Params(key, item, where=f"{self._where}.{key}[{i}]") for i, item in enumerate(value)]

    def nested(self, key: str) -> Params | None:
        """A nested mapping as its own :class:`Params` (call its ``done``); None when absent."""
        value = self._get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self._error(key, "must be a mapping", value)
        return Params(key, value, where=f"{self._where}.{key}")

    def present(self, key: str) -> bool:
        """Whether ``key`` is set (marks it read; for keys a plugin refuses by name)."""
        return self._get(key) is not None

    def choice(self, key: str, default: str, choices: Sequence[str]) -> str:
        """One of ``choices``, spelt exactly."""
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, str) or value not in choices:
            raise self._error(key, f"must be one of {', '.join(choices)}", value)
        return value

    def duration(self, key: str, default: float) -> float:
        """Seconds; a string in Go duration syntax or a number of seconds. Must be > 0."""
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, str):
            try:
                seconds = parse_duration(value)
            except ValueError:
                raise self._error(key, "must be a duration such as '200ms' or '1s'", value) from None
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            seconds = float(value)
        else:
            raise self._error(key, "must be a duration such as '200ms' or a number of seconds", value)
        if seconds <= 0:
            raise self._error(key, "must be > 0", value)
        return seconds

    def done(self) -> None:
        """Reject keys no getter asked for."""
        unknown = sorted(set(self._raw) - self._seen)
        if unknown:
            raise PluginConfigError(f"{self._where}: unknown field(s) {unknown}")
