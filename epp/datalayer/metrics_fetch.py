"""One keep-alive HTTP/1.1 connection per endpoint for ``GET /metrics``: the scraper's transport.

Each endpoint is polled every 50 ms by its own task, so there is nothing to pool: a connection
per endpoint, opened once and reused, is the whole job. A general client pays for what this
does not need (pools, cookies, redirects, middleware); measured here against a 45 KB vLLM page,
aiohttp spent ~280 µs of CPU per GET and this ~70 µs, and the picker shares its core with the
request path. The protocol handled is exactly what a metrics endpoint sends: a status line,
headers, and a body framed by ``Content-Length``, chunked encoding, or the connection closing.
Anything else is a :class:`FetchError` naming the endpoint; the connection is dropped after any
error (its state is unknown) and the next poll reconnects.

HTTPS (``scheme: https`` of ``metrics-data-source``, or ``--model-server-metrics-scheme https``) is
the same exchange over one TLS session per connection, kept alive like the plaintext one, so the
handshake is paid once per endpoint, not per poll. One :func:`tls_context` (server check against
a CA bundle or the system CAs, or none; a client certificate for mTLS) serves every connection
of a scrape spec.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from epp.framework.endpoint import join_host_port

__all__ = ["FetchError", "MetricsConnection", "TlsFileError", "tls_context"]

_MAX_HEAD = 64 * 1024


class FetchError(Exception):
    """A failed GET; ``reason`` is ``connect`` or ``http`` (the scrape-error label).

    ``unreachable``: nothing listens there any more (connection refused or reset, no route, the
    name does not resolve), as opposed to a server that answered badly or a TLS mismatch.
    """

    def __init__(self, reason: str, detail: str, *, unreachable: bool = False) -> None:
        super().__init__(detail)
        self.reason = reason
        self.unreachable = unreachable


def _unreachable(e: BaseException) -> bool:
    return isinstance(e, (ConnectionError, socket.gaierror, asyncio.IncompleteReadError)) or (
        type(e) is OSError and e.errno is not None  # EHOSTUNREACH, ENETUNREACH and friends
    )


class TlsFileError(ValueError):
    """A CA bundle or client certificate that cannot be loaded; the message names the parameter."""


def tls_context(*, verify: bool, ca_file: str = "", cert_file: str = "", key_file: str = "") -> ssl.SSLContext:
    """The client context for HTTPS model servers; reads the files given (raises :class:`TlsFileError`).

    ``verify``: the server's certificate must chain to ``ca_file`` (``caCertPath``) if given, else
    to the system CAs (``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` say where those are), and name the
    address dialled (a pod's IP); else nothing is checked, upstream's default
    (``insecureSkipVerify``, ``--model-server-metrics-https-insecure-skip-verify``, both true).
    ``cert_file`` and ``key_file`` (``clientCertPath``, ``clientKeyPath``): the certificate this
    scraper presents, for model servers that require mTLS.
    """
    try:
        context = ssl.create_default_context(cafile=ca_file if verify and ca_file else None)
    except (OSError, ssl.SSLError) as e:
        raise TlsFileError(f"caCertPath: cannot load a CA bundle from {ca_file!r}: {e}") from e
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file:
        try:
            context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as e:
            raise TlsFileError(
                f"clientCertPath/clientKeyPath: cannot load a certificate and key from "
                f"{cert_file!r} and {key_file!r}: {e}"
            ) from e
    return context


class MetricsConnection:
    """A reusable connection to ``host:port`` for one path; not safe for concurrent use."""

    def __init__(self, host: str, port: int, path: str, *, tls: ssl.SSLContext | None = None, max_body: int) -> None:
        self.host = host
        self.port = port
        self._ssl = tls
        authority = join_host_port(host, port)
        self.where = f"{'https' if tls else 'http'}://{authority}{path}"
        self._request = (
            f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: text/plain;version=0.0.4\r\n"
            "User-Agent: epp-scraper\r\n\r\n"
        ).encode()
        self._max_body = max_body
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def get(self) -> bytes:
        """The body of one ``200`` answer; raises :class:`FetchError` (the connection is then dropped)."""
        try:
            return await self._get()
        except BaseException:  # includes cancellation by the caller's timeout: the stream is mid-answer
            self.close()
            raise

    async def _get(self) -> bytes:
        reused = self._writer is not None and not self._writer.is_closing()
        try:
            head = await self._send(fresh=not reused)
        except FetchError as e:
            if not reused or e.reason != "connect":
                raise
            # A kept-alive connection the server closed meanwhile (idle timeout, restart): one
            # retry on a new connection tells that apart from a server that is gone.
            self.close()
            head = await self._send(fresh=True)
        reader = self._reader
        assert reader is not None
        status, length, chunked, close = self._parse_head(head)
        try:
            if chunked:
                body = await self._read_chunked(reader)
            elif length is not None:
                if length > self._max_body:
                    raise FetchError("http", f"body from {self.where} exceeds {self._max_body} bytes")
                body = await reader.readexactly(length)
            else:  # no framing: the body runs until the server closes
                body = await self._read_to_close(reader)
                close = True
        except (asyncio.IncompleteReadError, OSError) as e:  # OSError: ConnectionError, ssl.SSLError
            raise FetchError(
                "connect", f"connection lost mid-body ({self.where}): {e}", unreachable=_unreachable(e)
            ) from e
        if close:
            self.close()
        if status != 200:
            raise FetchError("http", f"HTTP {status} from {self.where}")
        return body

    async def _send(self, *, fresh: bool) -> bytes:
        """Write the request (on a new connection if ``fresh``) and read the answer's head."""
        if fresh:
            try:
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self._ssl, limit=_MAX_HEAD
                )
            except OSError as e:
                raise FetchError(
                    "connect", f"{type(e).__name__}: {e} ({self.where})", unreachable=_unreachable(e)
                ) from e
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        try:
            writer.write(self._request)
            return await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, OSError) as e:  # OSError: ConnectionError, ssl.SSLError
            raise FetchError(
                "connect", f"connection lost before an answer ({self.where}): {e}", unreachable=_unreachable(e)
            ) from e
        except asyncio.LimitOverrunError as e:
            raise FetchError("http", f"response head over {_MAX_HEAD} bytes from {self.where}") from e

    def _parse_head(self, head: bytes) -> tuple[int, int | None, bool, bool]:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise FetchError("http", f"not an HTTP/1.x answer from {self.where}: {lines[0][:80]!r}")
        status = int(parts[1])
        length: int | None = None
        chunked = False
        close = parts[0] == b"HTTP/1.0"
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                continue
            key = name.strip().lower()
            if key == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise FetchError("http", f"bad Content-Length {value.strip()!r} from {self.where}") from None
            elif key == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif key == b"connection":
                token = value.strip().lower()
                close = token == b"close" or (close and token != b"keep-alive")
        return status, length, chunked, close

    async def _read_to_close(self, reader: asyncio.StreamReader) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while chunk := await reader.read(64 * 1024):  # one read returns what has arrived, not all
            size += len(chunk)
            if size > self._max_body:
                raise FetchError("http", f"body from {self.where} exceeds {self._max_body} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _read_chunked(self, reader: asyncio.StreamReader) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            line = await reader.readuntil(b"\r\n")
            try:
                n = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise FetchError("http", f"bad chunk size {line[:40]!r} from {self.where}") from None
            if n == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, if any
                    pass
                return b"".join(chunks)
            size += n
            if size > self._max_body:
                raise FetchError("http", f"body from {self.where} exceeds {self._max_body} bytes")
            chunks.append(await reader.readexactly(n))
            await reader.readexactly(2)

    def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
