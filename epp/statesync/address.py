"""llm-d's Valkey/Redis server addresses, read as llm-d-kv-cache reads them, into what redis-py connects to.

``redis://`` and ``rediss://`` (TLS) are taken as given, ``valkey://`` and ``valkeys://`` are the
same protocol under Valkey's names, ``unix://`` is a socket path, and a bare ``host:port`` means
``redis://host:port``. Anything else (another scheme, no host, a bad port) is refused naming it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["AddressError", "redis_url"]

_SCHEMES = {"redis": "redis", "rediss": "rediss", "valkey": "redis", "valkeys": "rediss", "unix": "unix"}


class AddressError(ValueError):
    """Not a Valkey or Redis address."""


def redis_url(address: str) -> str:
    """The ``redis://``/``rediss://``/``unix://`` URL for llm-d's ``address``; AddressError when it is none."""
    text = address.strip()
    if not text:
        raise AddressError("empty address")
    if "://" not in text:
        text = "redis://" + text
    parts = urlsplit(text)
    scheme = _SCHEMES.get(parts.scheme)
    if scheme is None:
        raise AddressError(f"{address!r}: scheme {parts.scheme!r} is not one of {', '.join(sorted(_SCHEMES))}")
    if scheme == "unix":
        if not parts.path:
            raise AddressError(f"{address!r}: no socket path")
        return text
    try:
        parts.port  # noqa: B018 (urlsplit checks the port only when asked)
    except ValueError as e:
        raise AddressError(f"{address!r}: {e}") from e
    if not parts.hostname:
        raise AddressError(f"{address!r}: no host")
    return scheme + text[text.index("://") :]
