"""How the autoscaler reaches Prometheus: TLS and a bearer token, upstream WVA's ``PROMETHEUS_*`` settings.

Upstream's settings, read from the same environment variables (each also a flag of ``epp
autoscale``): ``PROMETHEUS_CA_CERT_PATH``, ``PROMETHEUS_CLIENT_CERT_PATH`` /
``PROMETHEUS_CLIENT_KEY_PATH`` (mTLS), ``PROMETHEUS_TLS_INSECURE_SKIP_VERIFY``,
``PROMETHEUS_SERVER_NAME`` (the name the certificate must carry, instead of the URL's host),
``PROMETHEUS_BEARER_TOKEN`` or ``PROMETHEUS_TOKEN_PATH``. Checked as upstream's
``ValidateTLSConfig`` checks them: a URL with credentials in it is refused (they leak through
process listings and logs), the scheme is ``http`` or ``https``, and over plain ``http`` neither a
token nor a TLS setting is accepted. Over ``https``: TLS 1.2 at least, the server's certificate
checked against the system CAs or the CA file unless verification is skipped.

Stricter than upstream: a client certificate without its key (or the reverse) is an error
(upstream ignores the one given), and redirects are not followed (a token never goes to another
address). Better: the token file is re-read, off the event loop, once a minute, so a projected
service-account token that the kubelet rotates keeps working (upstream reads it once at start).
``PROMETHEUS_ALLOW_HTTP`` is not read: ``epp autoscale`` has always accepted an ``http`` URL.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import urllib.parse
from pathlib import Path

from epp.clock import Clock, SystemClock
from epp.datalayer.metrics_fetch import TlsFileError, tls_context

__all__ = ["TOKEN_REFRESH", "PrometheusAccess", "PrometheusAccessError"]

TOKEN_REFRESH = 60.0

log = logging.getLogger(__name__)


class PrometheusAccessError(ValueError):
    """Settings that cannot reach Prometheus; the message names the setting."""


def _tls(ca_cert: str, client_cert: str, client_key: str, *, verify: bool) -> ssl.SSLContext:
    try:
        context = tls_context(verify=verify, ca_file=ca_cert, cert_file=client_cert, key_file=client_key)
    except TlsFileError as e:  # its message names the file; ours names the setting
        raise PrometheusAccessError(
            f"Prometheus TLS (PROMETHEUS_CA_CERT_PATH, PROMETHEUS_CLIENT_CERT_PATH, PROMETHEUS_CLIENT_KEY_PATH): {e}"
        ) from e
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class PrometheusAccess:
    """The base URL, the TLS context (``https`` only) and the bearer token to send; build with :meth:`build`."""

    def __init__(
        self,
        url: str,
        *,
        tls: ssl.SSLContext | None = None,
        server_name: str = "",
        token: str = "",
        token_path: str = "",
        clock: Clock | None = None,
    ) -> None:
        self.url = url
        self.tls = tls
        self.server_name = server_name or None
        self._token = token
        self._token_path = "" if token else token_path
        self._clock = clock or SystemClock()
        self._read_at: float | None = None

    @classmethod
    def build(
        cls,
        url: str,
        *,
        ca_cert: str = "",
        client_cert: str = "",
        client_key: str = "",
        insecure_skip_verify: bool = False,
        server_name: str = "",
        token: str = "",
        token_path: str = "",
        clock: Clock | None = None,
    ) -> PrometheusAccess:
        """Validate the settings and load the files (blocking: call it off the event loop)."""
        parts = urllib.parse.urlsplit(url)
        if parts.username is not None or parts.password is not None:
            raise PrometheusAccessError(
                "PROMETHEUS_BASE_URL: refusing a URL with credentials in it; use PROMETHEUS_BEARER_TOKEN or "
                "PROMETHEUS_TOKEN_PATH (over https)"
            )
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise PrometheusAccessError(f"PROMETHEUS_BASE_URL: {url!r} is not an http:// or https:// URL")
        if bool(client_cert) != bool(client_key):
            raise PrometheusAccessError(
                "PROMETHEUS_CLIENT_CERT_PATH and PROMETHEUS_CLIENT_KEY_PATH go together (mTLS needs both)"
            )
        if parts.scheme == "http":
            if token or token_path:
                raise PrometheusAccessError(f"refusing to send a bearer token over plain http to {url!r}")
            tls_set = [
                name
                for name, value in (
                    ("PROMETHEUS_CA_CERT_PATH", ca_cert),
                    ("PROMETHEUS_CLIENT_CERT_PATH", client_cert),
                    ("PROMETHEUS_TLS_INSECURE_SKIP_VERIFY", insecure_skip_verify),
                    ("PROMETHEUS_SERVER_NAME", server_name),
                )
                if value
            ]
            if tls_set:
                raise PrometheusAccessError(
                    f"{', '.join(tls_set)}: TLS settings with a plain http URL {url!r}; use https:// or remove them"
                )
            return cls(url, clock=clock)
        tls = _tls(ca_cert, client_cert, client_key, verify=not insecure_skip_verify)
        access = cls(url, tls=tls, server_name=server_name, token=token, token_path=token_path, clock=clock)
        if access._token_path:
            access._token = access._read_token()
        return access

    def _read_token(self) -> str:
        try:
            token = Path(self._token_path).read_text().strip()
        except OSError as e:
            raise PrometheusAccessError(f"PROMETHEUS_TOKEN_PATH: cannot read {self._token_path!r}: {e}") from e
        self._read_at = self._clock.now()
        if not token:
            raise PrometheusAccessError(f"PROMETHEUS_TOKEN_PATH: {self._token_path!r} is empty")
        return token

    async def headers(self) -> dict[str, str]:
        """The ``Authorization`` header, if any; a token file read :data:`TOKEN_REFRESH` s ago or more is read again.

        A file that cannot be read then keeps the last token, and says so in the log.
        """
        if self._token_path and (self._read_at is None or self._clock.now() - self._read_at >= TOKEN_REFRESH):
            try:
                self._token = await asyncio.to_thread(self._read_token)
            except PrometheusAccessError as e:
                self._read_at = self._clock.now()
                log.warning("keeping the last Prometheus token", extra={"error": str(e)})
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}
