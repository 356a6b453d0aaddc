"""What the picker and its scrape worker process say to each other, and how it is framed on their pipes.

The worker (:mod:`epp.datalayer.scrape_worker`) is a child of ``epp serve`` running the same
:class:`~epp.datalayer.scraper.ScraperManager`; the only channel is its stdin (the picker's
messages) and stdout (the worker's batches). Each message is one frame: a 4-byte big-endian
length, then a pickle of a tuple whose first item names it. Both ends are this program, started
together, so pickle's trust model holds; the pickler here also carries the read-only mappings
(``MappingProxyType``) our frozen types use, which plain pickle refuses.

To the worker: :class:`Setup` once, then ``("spec", ScrapeSpec)`` (without its TLS context: the
worker builds its own from the transport), ``("add", [(id, Endpoint), ...])`` and
``("remove", [id, ...])``. From the worker: :class:`Batch` messages, at most one per flush tick.

The same framing carries ``epp serve --workers``' messages (:mod:`epp.workers.supervisor`), and
:func:`run_child` is both children's entry point: a loop on uvloop, their stdin and stdout as
frame streams, and the signals the parent decides on ignored (a terminal's Ctrl-C reaches the whole
process group; a child stops when the parent says so or its stdin ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import copyreg
import io
import pickle
import signal
import struct
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from epp.config.options import LoggingOptions
from epp.framework.endpoint import MetricsSnapshot

__all__ = [
    "MAX_FRAME",
    "Batch",
    "HealthEvent",
    "Setup",
    "dumps",
    "read_frame",
    "read_only",
    "run_child",
    "write_frame",
]

MAX_FRAME = 64 * 1024 * 1024
_LENGTH = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Setup:
    """The ScraperManager settings of the picker, and how the worker logs."""

    interval: float
    timeout: float
    max_backoff: float
    max_body_bytes: int
    flush_interval: float
    logging: LoggingOptions


HealthEvent = tuple[int, str, tuple[Any, ...]]
"""(endpoint id, method of :class:`~epp.framework.health.EndpointHealth`, its arguments), in call order."""


@dataclass(slots=True)
class Batch:
    """What the worker learnt since its last batch: latest snapshot per endpoint id, health calls, metric deltas.

    ``durations`` and ``intervals``: per engine, (per-bucket counts, sum) of the
    ``epp_scrape_duration_seconds`` / ``epp_scrape_interval_seconds`` observations; ``errors``:
    new ``epp_scrape_errors_total`` per reason.
    """

    snapshots: dict[int, MetricsSnapshot] = field(default_factory=dict)
    health: list[HealthEvent] = field(default_factory=list)
    durations: dict[str, tuple[list[int], float]] = field(default_factory=dict)
    intervals: dict[str, tuple[list[int], float]] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)


def read_only(items: dict[Any, Any]) -> Mapping[Any, Any]:
    """Rebuilds a pickled ``MappingProxyType`` (the type itself has no importable name)."""
    return MappingProxyType(items)


def _proxy(mapping: MappingProxyType[Any, Any]) -> tuple[Any, tuple[dict[Any, Any]]]:
    return read_only, (dict(mapping),)


class _Pickler(pickle.Pickler):
    dispatch_table: Mapping[type, Any] = {**copyreg.dispatch_table, MappingProxyType: _proxy}


def dumps(message: tuple[Any, ...]) -> bytes:
    """One frame: length, then the pickled message."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    data = buffer.getbuffer()
    _LENGTH.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def write_frame(writer: asyncio.StreamWriter | asyncio.WriteTransport, message: tuple[Any, ...]) -> None:
    """Queue ``message`` on ``writer`` (never blocks; the transport buffers)."""
    writer.write(dumps(message))


async def read_frame(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """The next message, or None at the end of the stream; ValueError on a frame that cannot be one."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise ValueError("scrape pipe ended inside a frame header") from e
        return None
    (length,) = _LENGTH.unpack(head)
    if length > MAX_FRAME:
        raise ValueError(f"scrape pipe frame of {length} bytes (over {MAX_FRAME})")
    try:
        data = await reader.readexactly(length)
    except asyncio.IncompleteReadError as e:
        raise ValueError("scrape pipe ended inside a frame") from e
    message = pickle.loads(data)
    if not isinstance(message, tuple) or not message or not isinstance(message[0], str):
        raise ValueError(f"scrape pipe message is not a named tuple: {type(message).__name__}")
    return message


Serve = Callable[[asyncio.StreamReader, asyncio.WriteTransport], Awaitable[None]]
"""A child's work: its parent's frames in, its own frames out."""


def run_child(serve: Serve, *, ignore: tuple[signal.Signals, ...]) -> int:
    """Run ``serve`` on stdin and stdout until it returns; ``ignore`` the signals the parent decides on."""
    for sig in ignore:
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(_on_stdio(serve))
    return 0


async def _on_stdio(serve: Serve) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**16)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    try:
        await serve(reader, out)
    finally:
        out.close()
