"""``--enable-cert-reload``: serve the newest good ``--cert-path`` pair to each new TLS handshake.

As upstream's ``CertReloader`` (LDR ``pkg/common/certs.go``): the directory is watched with
inotify (fsnotify there); a Write or Create event (``IN_MODIFY``/``IN_CLOSE_WRITE``,
``IN_CREATE``/``IN_MOVED_TO``, which also covers Kubernetes' ``..data`` symlink swap of a mounted
Secret) starts a 250 ms debounce, then both files are read again. A pair that does not load (a
half-written file, a key that does not match) is logged and the current certificate stays.

grpc python asks :meth:`CertReloader.fetch` for a certificate on every new handshake, from one of
grpc core's threads: it only compares two references and returns the new configuration once
(None means "unchanged", so grpc keeps its SSL context instead of rebuilding it per handshake).
Open connections, and the streams on them, keep the certificate they were set up with. The
watch and the file reads run on the event loop's reader callback and in a worker thread, never
blocking the loop.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc

from epp.extproc.tls import TlsConfig, TlsError
from epp.tasks import cancel_and_wait, start_guarded

if TYPE_CHECKING:
    from asyncinotify import Inotify

__all__ = ["CertReloader", "port_tls"]

log = logging.getLogger(__name__)

_DEBOUNCE = 0.25  # seconds of quiet after the last event, as upstream


@dataclass(frozen=True, eq=False)
class _Served:
    """One certificate pair and the grpc configuration built from it (made once, on the loop)."""

    tls: TlsConfig
    configuration: grpc.ServerCertificateConfiguration = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "configuration", self.tls.certificate_configuration())


class CertReloader:
    """Owns the served pair of one ``--cert-path`` directory and the task that watches it."""

    def __init__(self, cert_path: str, initial: TlsConfig) -> None:
        self.cert_path = cert_path
        self._current = _Served(initial)
        self._handed_out = self._current  # what grpc was last given (the initial one at start)
        self._task: asyncio.Task[None] | None = None

    @property
    def current(self) -> TlsConfig:
        """The pair new handshakes get."""
        return self._current.tls

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials that consult :meth:`fetch` on each handshake."""
        return grpc.dynamic_ssl_server_credentials(self._current.configuration, self.fetch)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """grpc's per-handshake callback (a core thread): the new configuration once, else None."""
        current = self._current
        if current is self._handed_out:
            return None
        self._handed_out = current
        return current.configuration

    async def start(self) -> None:
        """Start watching the directory (Linux inotify)."""
        if self._task is not None:
            return
        try:
            from asyncinotify import Inotify, Mask
        except (ImportError, AttributeError, OSError) as e:  # not Linux: no inotify in libc
            raise TlsError(f"--enable-cert-reload needs Linux inotify: {e}") from e
        try:
            inotify = Inotify()
        except OSError as e:  # the per-user inotify instance limit, say
            raise TlsError(f"--enable-cert-reload: cannot start inotify: {e}") from e
        try:
            inotify.add_watch(self.cert_path, Mask.MODIFY | Mask.CLOSE_WRITE | Mask.CREATE | Mask.MOVED_TO)
        except OSError as e:
            inotify.close()
            raise TlsError(f"--cert-path {self.cert_path!r}: cannot watch it: {e}") from e
        self._task = start_guarded(self._watch(inotify), f"cert-reload:{self.cert_path}", forever=True)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _watch(self, inotify: Inotify) -> None:
        with inotify:
            while True:
                await inotify.get()
                while True:  # debounce: reload once the directory has been quiet for a while
                    try:
                        async with asyncio.timeout(_DEBOUNCE):
                            await inotify.get()
                    except TimeoutError:
                        break
                await self.reload()

    async def reload(self) -> None:
        """Read the pair again; new handshakes get it if it loads and differs."""
        try:
            fresh = await asyncio.to_thread(TlsConfig.load, self.cert_path)
        except TlsError as e:
            log.error("certificate reload failed; serving the previous one", extra={"error": str(e)})
            return
        if fresh != self._current.tls:
            self._current = _Served(fresh)
            log.info("certificate reloaded", extra={"cert_path": self.cert_path})


async def port_tls(
    cert_path: str, *, reload: bool, given: tuple[bytes, bytes] | None = None
) -> TlsConfig | CertReloader:
    """The ext_proc port's certificate: ``given`` (PEM certificate and key), else the ``cert_path`` pair
    (a :class:`CertReloader`, started, with ``reload``), else a self-signed one.

    Reading the files or generating an RSA-4096 key (~0.35 s) happens off the loop.
    """
    if given is not None:
        return TlsConfig(*given)
    pair = await asyncio.to_thread(TlsConfig.from_cert_path, cert_path or None)
    if not reload:
        return pair
    reloader = CertReloader(cert_path, pair)
    await reloader.start()
    return reloader
