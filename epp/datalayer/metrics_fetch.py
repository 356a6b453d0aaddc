"""One keep-alive HTTP/1.1 connection per endpoint for ``GET /metrics``: the scraper's transport.

Each endpoint is polled every 50 ms by its own task, so there is nothing to pool: a connection
per endpoint, opened once and reused, is the whole job. A general client pays for what this
does not need (pools, cookies, redirects, middleware); measured here against a 45 KB vLLM page,
aiohttp spent ~280 µs of CPU per GET and this ~70 µs, and the picker shares its core with the
request path. The protocol handled is exactly what a metrics endpoint sends: a status line,
headers, and a body framed by ``Content-Length``, chunked encoding, or the connection closing.
Anything else is a :class:`FetchError` naming the endpoint; the connection is dropped after any
error (its state is unknown) and the next poll reconnects. The answer is read by a buffered
protocol into one buffer per connection (64 KiB, doubled when a page outgrows it, kept for the
next poll): the kernel copies each read straight into it, the body is copied out once, and the
waiting poll is woken once, when the answer is complete, instead of a stream reader's copy and
wake-up per read.

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
_BUFFER = 64 * 1024  # a vLLM page is ~50 KB: one buffer per connection, grown when a page outgrows it
_MIN_READ = 16 * 1024


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
        self._transport: asyncio.Transport | None = None
        self._reply: _Reply | None = None

    @property
    def connected(self) -> bool:
        """Whether a connection is open (the server may still close it before the next GET)."""
        return self._reply is not None and not self._reply.closed

    async def get(self) -> bytes:
        """The body of one ``200`` answer; raises :class:`FetchError` (the connection is then dropped)."""
        try:
            return await self._get()
        except BaseException:  # includes cancellation by the caller's timeout: the stream is mid-answer
            self.close()
            raise

    async def _get(self) -> bytes:
        reused = self.connected
        if not reused:
            await self._connect()
        try:
            return await self._exchange()
        except _NoAnswerError as e:
            if not reused:
                raise FetchError("connect", str(e), unreachable=True) from e.__cause__
            # A kept-alive connection the server closed meanwhile (idle timeout, restart): one
            # retry on a new connection tells that apart from a server that is gone.
            self.close()
            await self._connect()
            try:
                return await self._exchange()
            except _NoAnswerError as again:
                raise FetchError("connect", str(again), unreachable=True) from again.__cause__

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, reply = await loop.create_connection(
                lambda: _Reply(self, self._max_body), self.host, self.port, ssl=self._ssl
            )
        except OSError as e:  # ConnectionRefusedError, ssl.SSLError, gaierror, EHOSTUNREACH ...
            raise FetchError("connect", f"{type(e).__name__}: {e} ({self.where})", unreachable=_unreachable(e)) from e
        self._transport, self._reply = transport, reply

    async def _exchange(self) -> bytes:
        transport, reply = self._transport, self._reply
        assert transport is not None and reply is not None
        answer = reply.expect()
        transport.write(self._request)
        body, close = await answer
        if close:
            self.close()
        return body

    def _head(self, head: bytes) -> tuple[int, int | None, bool, bool]:
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

    def close(self) -> None:
        transport, self._transport, self._reply = self._transport, None, None
        if transport is not None:
            transport.close()


class _NoAnswerError(Exception):
    """The connection ended before any byte of an answer: retried once on a kept-alive connection."""


class _Reply(asyncio.BufferedProtocol):
    """The receiving side of one connection: socket reads land in one reusable buffer, and the pending
    GET is resolved when its answer is complete (no stream reader, no copy per read, one wake-up)."""

    def __init__(self, conn: MetricsConnection, max_body: int) -> None:
        self._conn = conn
        self._max_body = max_body
        self._buf = bytearray(_BUFFER)
        self._filled = 0
        self._waiter: asyncio.Future[tuple[bytes, bool]] | None = None
        self._head_end = -1  # offset just past the head, once it has arrived
        self._framing: tuple[int, int | None, bool, bool] = (0, None, False, False)
        self._transport: asyncio.BaseTransport | None = None
        self.closed = False

    def expect(self) -> asyncio.Future[tuple[bytes, bool]]:
        """The answer to the request about to be written: (body, close after it)."""
        self._filled, self._head_end = 0, -1
        self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self._buf) - self._filled < _MIN_READ:  # a page larger than the last one: double the buffer
            grown = bytearray(2 * len(self._buf))  # a new one: the old may still be exported to the transport
            grown[: self._filled] = self._buf[: self._filled]
            self._buf = grown
        return memoryview(self._buf)[self._filled :]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._waiter is not None:
            self._progress(ended=False)
        elif self._filled > _MAX_HEAD and self._transport is not None:
            self._transport.close()  # bytes nobody asked for: drop the connection, the next poll opens another

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None:
            self._progress(ended=True, exc=exc)

    def _progress(self, *, ended: bool, exc: Exception | None = None) -> None:
        try:
            done = self._answer(ended)
        except FetchError as e:
            self._finish(error=e)
            return
        if done is not None:
            self._finish(result=done)
        elif ended:
            where = self._conn.where
            if self._filled == 0:
                error: Exception = _NoAnswerError(f"connection lost before an answer ({where}): {exc or 'closed'}")
                error.__cause__ = exc
            else:
                stage = "mid-body" if self._head_end >= 0 else "before an answer"
                error = FetchError("connect", f"connection lost {stage} ({where}): {exc or 'closed'}", unreachable=True)
            self._finish(error=error)

    def _finish(self, *, result: tuple[bytes, bool] | None = None, error: Exception | None = None) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        if error is not None:
            waiter.set_exception(error)
        else:
            assert result is not None
            waiter.set_result(result)

    def _answer(self, ended: bool) -> tuple[bytes, bool] | None:
        """(body, close) once the answer is complete; None while more is to come; FetchError if it is bad."""
        buf, filled, where = self._buf, self._filled, self._conn.where
        if self._head_end < 0:
            end = buf.find(b"\r\n\r\n", 0, filled)
            if end < 0:
                if filled > _MAX_HEAD:
                    raise FetchError("http", f"response head over {_MAX_HEAD} bytes from {where}")
                return None
            self._head_end = end + 4
            self._framing = self._conn._head(bytes(buf[:end]))
            if self._framing[1] is not None and self._framing[1] > self._max_body:
                raise FetchError("http", f"body from {where} exceeds {self._max_body} bytes")
        status, length, chunked, close = self._framing
        start = self._head_end
        if chunked:
            if filled - start > self._max_body + _MAX_HEAD:  # the chunks' framing is far less than this
                raise FetchError("http", f"body from {where} exceeds {self._max_body} bytes")
            decoded = _dechunk(buf, start, filled, where)
            if decoded is None:
                return None
            body = decoded
        elif length is not None:
            if filled - start < length:
                return None
            with memoryview(buf) as view:
                body = bytes(view[start : start + length])
        else:  # no framing: the body runs until the server closes
            if filled - start > self._max_body:
                raise FetchError("http", f"body from {where} exceeds {self._max_body} bytes")
            if not ended:
                return None
            with memoryview(buf) as view:
                body, close = bytes(view[start:filled]), True
        if len(body) > self._max_body:
            raise FetchError("http", f"body from {where} exceeds {self._max_body} bytes")
        if status != 200:
            raise FetchError("http", f"HTTP {status} from {where}")
        return body, close


def _dechunk(buf: bytearray, pos: int, filled: int, where: str) -> bytes | None:
    """The body of a complete chunked answer in ``buf[pos:filled]``; None if more is to come."""
    chunks: list[bytes] = []
    while True:
        line_end = buf.find(b"\r\n", pos, filled)
        if line_end < 0:
            return None
        try:
            size = int(bytes(buf[pos:line_end]).split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise FetchError("http", f"bad chunk size {bytes(buf[pos:line_end])[:40]!r} from {where}") from None
        pos = line_end + 2
        if size == 0:
            while True:  # trailers, if any, then the empty line
                line_end = buf.find(b"\r\n", pos, filled)
                if line_end < 0:
                    return None
                if line_end == pos:
                    return b"".join(chunks)
                pos = line_end + 2
        if filled < pos + size + 2:
            return None
        chunks.append(bytes(buf[pos : pos + size]))
        pos += size + 2
