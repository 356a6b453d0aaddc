"""Reaching Prometheus as upstream's ``PROMETHEUS_*`` settings say: real TLS handshakes on loopback.

A throwaway CA signs a "Prometheus" (an HTTPS server of the query API on 127.0.0.1 that requires a
client certificate and a bearer token) and the autoscaler's client certificate. What is checked:
the query goes through with the CA, the client pair and the token; each missing piece fails the
handshake or the request with a message saying so; the token file is read again after a minute;
redirects are not followed; bad settings are refused before anything connects.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from epp.autoscale.inputs import InputError
from epp.autoscale.prometheus import PrometheusSource
from epp.autoscale.prometheus_access import TOKEN_REFRESH, PrometheusAccess, PrometheusAccessError
from epp.clock import ManualClock
from epp.telemetry.metrics_server import metrics_ssl_context
from epp_sim.pki import Pki, make_pki

VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "7"]}]}}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), server="prometheus", client="autoscaler")


@dataclass
class _Prometheus:
    """Answers ``/api/v1/query`` to the expected token only; ``/moved`` redirects there."""

    token: str = "t1"
    seen: list[str] = field(default_factory=list)
    url: str = ""

    async def query(self, request: web.Request) -> web.Response:
        got = request.headers.get("Authorization", "")
        self.seen.append(got)
        if got != f"Bearer {self.token}":
            return web.json_response({"status": "error", "error": "unauthorized"}, status=401)
        return web.json_response(VECTOR)

    async def moved(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("https://127.0.0.1:1/api/v1/query")


@pytest.fixture
async def prometheus(pki: Pki) -> AsyncIterator[_Prometheus]:
    fake = _Prometheus()
    app = web.Application()
    app.router.add_get("/api/v1/query", fake.query)
    app.router.add_get("/moved/api/v1/query", fake.moved)
    runner = web.AppRunner(app)
    await runner.setup()
    tls = await asyncio.to_thread(metrics_ssl_context, str(pki.server_dir), str(pki.ca))  # client certs required
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    fake.url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield fake
    finally:
        await runner.cleanup()


def _mtls(pki: Pki, url: str, **settings: object) -> PrometheusAccess:
    base: dict[str, object] = {
        "ca_cert": str(pki.ca),
        "client_cert": str(pki.client_cert),
        "client_key": str(pki.client_key),
    }
    return PrometheusAccess.build(url, **{**base, **settings})  # type: ignore[arg-type]


async def test_ca_client_certificate_and_a_rotated_token_file(
    pki: Pki, prometheus: _Prometheus, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("t1\n")
    clock = ManualClock()
    source = PrometheusSource(session, _mtls(pki, prometheus.url, token_path=str(token), clock=clock))
    assert [v for _, v in await source.query("up")] == [7.0]
    assert prometheus.seen == ["Bearer t1"]

    prometheus.token = "t2"  # the kubelet rotates the projected token: the old one is refused at once
    token.write_text("t2\n")
    with pytest.raises(InputError, match="HTTP 401 \\(check the bearer token\\)"):
        await source.query("up")
    clock.advance(TOKEN_REFRESH)  # a minute later the file is read again
    assert [v for _, v in await source.query("up")] == [7.0]
    assert prometheus.seen[-1] == "Bearer t2"

    token.unlink()  # unreadable later: the last token is kept
    clock.advance(TOKEN_REFRESH)
    assert [v for _, v in await source.query("up")] == [7.0]


async def test_each_missing_piece_fails_with_a_reason(
    pki: Pki, prometheus: _Prometheus, session: aiohttp.ClientSession
) -> None:
    cases = {
        "system CAs only": PrometheusAccess.build(prometheus.url, token="t1"),
        "no client certificate": PrometheusAccess.build(prometheus.url, ca_cert=str(pki.ca), token="t1"),
        "another server name": _mtls(pki, prometheus.url, token="t1", server_name="prometheus.example"),
    }
    for what, access in cases.items():  # the handshake fails (TLS 1.3: a refused client is a disconnect)
        with pytest.raises(
            InputError, match="Prometheus query 'up' failed: (ClientConnectorCertificateError|ServerDisconnectedError)"
        ):
            await PrometheusSource(session, access).query("up")
        assert prometheus.seen == [], what
    with pytest.raises(InputError, match="HTTP 401"):
        await PrometheusSource(session, _mtls(pki, prometheus.url)).query("up")  # no token
    assert prometheus.seen == [""]  # only the last one got past the handshake

    # not checking the server's certificate: the client pair still has to be right
    skip = PrometheusAccess.build(
        prometheus.url,
        client_cert=str(pki.client_cert),
        client_key=str(pki.client_key),
        insecure_skip_verify=True,
        token="t1",
    )
    assert [v for _, v in await PrometheusSource(session, skip).query("up")] == [7.0]


async def test_a_redirect_is_not_followed(pki: Pki, prometheus: _Prometheus, session: aiohttp.ClientSession) -> None:
    source = PrometheusSource(session, _mtls(pki, prometheus.url + "/moved", token="t1"))
    with pytest.raises(InputError, match="redirected \\(302\\), not followed"):
        await source.query("up")


@pytest.mark.parametrize(
    ("url", "settings", "message"),
    [
        ("https://user:pw@prometheus:9090", {}, "refusing a URL with credentials in it"),
        ("ftp://prometheus:9090", {}, "is not an http:// or https:// URL"),
        ("prometheus:9090", {}, "is not an http:// or https:// URL"),
        ("http://prometheus:9090", {"token": "t"}, "refusing to send a bearer token over plain http"),
        ("http://prometheus:9090", {"token_path": "/token"}, "refusing to send a bearer token over plain http"),
        (
            "http://prometheus:9090",
            {"insecure_skip_verify": True, "server_name": "p"},
            "PROMETHEUS_TLS_INSECURE_SKIP_VERIFY, PROMETHEUS_SERVER_NAME: TLS settings with a plain http URL",
        ),
        ("https://prometheus:9090", {"client_cert": "/tls.crt"}, "go together (mTLS needs both)"),
        ("https://prometheus:9090", {"ca_cert": "/nowhere.crt"}, "Prometheus TLS (PROMETHEUS_CA_CERT_PATH, "),
        ("https://prometheus:9090", {"token_path": "/nowhere/token"}, "PROMETHEUS_TOKEN_PATH: cannot read"),
    ],
)
def test_bad_settings_are_refused_by_name(url: str, settings: dict[str, object], message: str) -> None:
    with pytest.raises(PrometheusAccessError, match=re.escape(message)):
        PrometheusAccess.build(url, **settings)  # type: ignore[arg-type]


def test_an_empty_token_file_and_a_bad_client_pair(pki: Pki, tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    with pytest.raises(PrometheusAccessError, match="is empty"):
        PrometheusAccess.build("https://prometheus:9090", token_path=str(empty))
    with pytest.raises(PrometheusAccessError, match="cannot load a certificate and key"):
        PrometheusAccess.build("https://prometheus:9090", client_cert=str(pki.ca), client_key=str(pki.client_key))
