"""Keeping the fake API server's objects in a data directory across restarts (``--data-dir``).

A test of a controller's behaviour across an API-server restart needs what etcd gives a real
kube-apiserver: after the restart every object is still there with its uid, resourceVersion,
generation and creationTimestamp, and the resourceVersion counter goes on from where it was, so
no resourceVersion is ever issued twice. ``DataDir`` keeps exactly that, in ``<dir>/store.json``.

The watch history is not kept. A restored store starts with none, like a real server whose
watch cache starts after an etcd compaction: a watch from a resourceVersion older than the
restored counter gets 410 Gone (``Expired``), and the client relists; a watch from the restored
counter itself misses nothing and is served.

Writes never block the event loop and never tear the file. The store calls ``changed`` after
every committed write; the writes within ``interval`` seconds go out as one snapshot, written by
a single worker thread (so snapshots land in order) to a temporary file that is fsynced and then
renamed over ``store.json`` with ``os.replace``. ``aclose`` writes the final state on a clean
stop. A crash loses at most the last ``interval`` of writes (the file then holds an earlier,
complete state, and the resourceVersions of the lost writes may be issued again, as when the
end of etcd's log is lost); it never leaves a half-written file. A lock on ``<dir>/lock`` keeps a
second server out of the directory.

A file that cannot be read, or does not hold a state this module wrote, is a
``PersistenceError`` naming it: the server never silently starts empty over someone's data.

File format (JSON)::

    {"formatVersion": 1, "resourceVersion": 42,
     "objects": [{"group": "apps", "resource": "deployments", "object": {...}}, ...]}
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import math
import os
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epp_sim.apiserver.kinds import Obj

__all__ = ["FILE_NAME", "DataDir", "PersistenceError", "Snapshot"]

log = logging.getLogger(__name__)

FILE_NAME = "store.json"
_LOCK_NAME = "lock"
_FORMAT_VERSION = 1

ResourceKey = tuple[str, str]
"""``(group, plural)`` of a served resource."""


class PersistenceError(Exception):
    """The data directory cannot be used: unreadable, not a state we wrote, locked, or not writable."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The store's durable state: the resourceVersion counter and every object with its resource.

    The objects are the store's own (a stored object is never mutated after commit), so taking
    a snapshot copies nothing and encoding it on another thread is safe.
    """

    resource_version: int
    objects: tuple[tuple[ResourceKey, Obj], ...]


class DataDir:
    """A locked data directory: the state read when it was opened, and the writer of new states.

    Build it with :meth:`open` (blocking: before the event loop runs, or in ``asyncio.to_thread``).
    ``changed`` and ``aclose`` must then be called on the event loop the store lives on.
    """

    def __init__(self, path: Path, lock_fd: int, restored: Snapshot | None, *, interval: float) -> None:
        self.path = path
        self.file = path / FILE_NAME
        self.restored = restored
        """The state to restore; None when the directory held none yet."""
        self._lock_fd = lock_fd
        self._interval = interval
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="epp-sim-apiserver-persist")
        self._take: Callable[[], Snapshot] | None = None
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def open(cls, path: Path, *, interval: float = 0.1) -> DataDir:
        """Create ``path`` if missing, lock it, and read its state; PersistenceError names what failed."""
        if not (math.isfinite(interval) and interval >= 0):
            raise ValueError(f"interval must be >= 0 seconds, got {interval!r}")
        try:
            path.mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(path / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise PersistenceError(f"cannot use {path} as the API server's data directory: {e}") from e
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(lock_fd)
            raise PersistenceError(f"{path} is in use by another fake API server (it holds {path / _LOCK_NAME})") from e
        try:
            for stale in path.glob(f".{FILE_NAME}.*.tmp"):  # a crash between write and rename
                stale.unlink(missing_ok=True)
            restored = _read(path / FILE_NAME)
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(path, lock_fd, restored, interval=interval)

    @property
    def location(self) -> str:
        """The data file, for error messages."""
        return str(self.file)

    def changed(self, take: Callable[[], Snapshot]) -> None:
        """The store committed a write: write ``take()`` within ``interval`` seconds, off the loop."""
        if self._closed:
            return
        self._take = take
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._write_soon(), name="epp-sim-apiserver-persist")

    async def _write_soon(self) -> None:
        loop = asyncio.get_running_loop()
        while self._dirty and self._take is not None:
            await asyncio.sleep(self._interval)  # batches the writes of a burst into one file write
            self._dirty = False
            snapshot = self._take()
            try:
                await loop.run_in_executor(self._writer, self._write, snapshot)
            except OSError as e:  # keep serving; the next write tries again, the stop reports it
                log.error("cannot write the API server's data file", extra={"file": self.location, "error": str(e)})

    async def aclose(self, final: Snapshot) -> None:
        """Write ``final`` after any write in flight, then release the directory.

        Raises PersistenceError when the final state cannot be written.
        """
        if self._closed:
            return
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()  # a write already running in the worker finishes; ours is queued after it
            await asyncio.gather(task, return_exceptions=True)
        try:
            await asyncio.get_running_loop().run_in_executor(self._writer, self._write, final)
        except OSError as e:
            raise PersistenceError(f"cannot write the API server's state to {self.file}: {e}") from e
        finally:
            self.close()

    def close(self) -> None:
        """Release the directory without writing (a server that failed to start); idempotent."""
        self._closed = True
        if self._lock_fd >= 0:
            self._writer.shutdown(wait=False)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _write(self, snapshot: Snapshot) -> None:
        """Atomically replace the data file with ``snapshot`` (runs on the writer thread)."""
        data = json.dumps(_encode(snapshot), separators=(",", ":")).encode()
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=f".{FILE_NAME}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.file)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a power loss
        finally:
            os.close(dir_fd)


def _encode(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "formatVersion": _FORMAT_VERSION,
        "resourceVersion": snapshot.resource_version,
        "objects": [{"group": g, "resource": r, "object": o} for (g, r), o in snapshot.objects],
    }


def _read(file: Path) -> Snapshot | None:
    """The state in ``file``, None if there is no file; PersistenceError naming it otherwise."""
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise PersistenceError(f"cannot restore the API server's state from {file}: {e}") from e
    try:
        return _decode(raw)
    except ValueError as e:
        raise PersistenceError(f"cannot restore the API server's state from {file}: {e}") from e


def _decode(raw: bytes) -> Snapshot:
    """Check the document is a state this module wrote; ValueError says what is wrong and where."""
    doc = json.loads(raw)  # JSONDecodeError and UnicodeDecodeError are ValueErrors
    if not isinstance(doc, dict) or doc.get("formatVersion") != _FORMAT_VERSION:
        raise ValueError(f"not a fake API server state (formatVersion {_FORMAT_VERSION} expected)")
    rv = doc.get("resourceVersion")
    items = doc.get("objects")
    if not isinstance(rv, int) or isinstance(rv, bool) or rv < 0:
        raise ValueError(f"resourceVersion must be a non-negative integer, got {rv!r}")
    if not isinstance(items, list):
        raise ValueError("objects must be a list")
    objects: list[tuple[ResourceKey, Obj]] = []
    seen: set[tuple[str, str, str, str]] = set()
    for i, item in enumerate(items):
        key, obj = _entry(item, rv, f"objects[{i}]")
        meta = obj["metadata"]
        identity = (*key, str(meta.get("namespace") or ""), meta["name"])
        if identity in seen:
            raise ValueError(f"objects[{i}]: a second {key[1]} {identity[2]}/{identity[3]}")
        seen.add(identity)
        objects.append((key, obj))
    return Snapshot(rv, tuple(objects))


def _entry(item: object, counter: int, where: str) -> tuple[ResourceKey, Obj]:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: not an object")
    group, resource, obj = item.get("group"), item.get("resource"), item.get("object")
    if not isinstance(group, str) or not isinstance(resource, str) or not resource:
        raise ValueError(f"{where}: group and resource must be strings")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(obj, dict) or not isinstance(meta, dict):
        raise ValueError(f"{where}: object.metadata missing")
    if not isinstance(meta.get("name"), str) or not meta["name"] or not isinstance(meta.get("uid"), str):
        raise ValueError(f"{where}: metadata.name and metadata.uid must be strings")
    if not isinstance(meta.get("namespace", ""), str):
        raise ValueError(f"{where}: metadata.namespace must be a string")
    object_rv = meta.get("resourceVersion")
    if not isinstance(object_rv, str) or not object_rv.isdigit() or int(object_rv) > counter:
        raise ValueError(f"{where}: metadata.resourceVersion {object_rv!r} is not a number up to {counter}")
    return (group, resource), obj
