"""`epp autoscale`: flags, one cycle against the fake API server, and the served gauges."""

from __future__ import annotations

import argparse
import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
import yaml

from epp.autoscale.command import add_parser, run
from epp.tasks import cancel_and_wait, start_guarded
from epp_sim.apiserver.fixture import running_apiserver
from epp_sim.pki import make_pki
from epp_sim.ports import free_port
from epp_sim.stack.cluster import FakeCluster
from epp_sim.waits import wait_until

CRD = Path(__file__).parents[2] / "manifests" / "autoscaler" / "crd.yaml"
SAMPLES = Path(__file__).parents[2] / "manifests" / "autoscaler" / "sample-va.yaml"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="epp")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["autoscale", *argv])


def test_flags_and_defaults() -> None:
    args = parse("--pending-timeout", "2m30s", "--interval", "15s", "--actuate")
    assert (args.pending_timeout, args.interval, args.actuate, args.metrics_port) == (150.0, 15.0, True, 8080)
    assert args.func is not None
    defaults = parse()
    assert (defaults.pending_timeout, defaults.interval, defaults.actuate) == (
        600.0,
        None,
        False,
    )  # 15s, or $GLOBAL_OPT_INTERVAL
    with pytest.raises(SystemExit):
        parse("--pending-timeout", "soon")


async def test_bad_flag_values_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(parse("--pending-timeout", "0")) == 2
    assert "--pending-timeout must be > 0" in capsys.readouterr().err


async def test_once_against_the_fake_api_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        store = api.server.store
        store.create("customresourcedefinitions", yaml.safe_load(CRD.read_text()))
        for doc in yaml.safe_load_all(SAMPLES.read_text()):  # the workload namespace, then its variants
            if doc["kind"] == "Namespace":
                store.create("namespaces", doc)
            else:
                store.create("variantautoscalings.llmd.ai", doc, namespace="llm-production")
        code = await run(parse("--kubeconfig", str(api.kubeconfig), "--once"))
    out = capsys.readouterr().out
    assert code == 0
    assert "llm-production/llama-8b-a100: Deployment llm-production/llama-8b-a100 not found" in out
    assert "llm-production/llama-8b-h100: Deployment llm-production/llama-8b-h100 not found" in out


async def test_loop_serves_gauges_until_stopped(tmp_path: Path) -> None:
    port = free_port()
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        store = api.server.store
        store.create("customresourcedefinitions", yaml.safe_load(CRD.read_text()))
        stop = asyncio.Event()
        task = start_guarded(
            run(parse("--kubeconfig", str(api.kubeconfig), "--metrics-port", str(port)), stop=stop),
            name="test-autoscale-command",
        )
        try:
            async with aiohttp.ClientSession() as http:

                async def served() -> bool:
                    try:
                        async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                            return resp.status == 200 and "wva_desired_replicas" in await resp.text()
                    except aiohttp.ClientError:
                        return False

                await wait_until(served, timeout=10)
            stop.set()
            assert await asyncio.wait_for(task, 10) == 0
        finally:
            await cancel_and_wait(task)


@pytest.mark.parametrize(
    ("value", "seconds"), [("", 15.0), ("45s", 45.0), ("2m", 120.0), ("30", 15.0), ("500ms", 15.0), ("soon", 15.0)]
)
def test_global_opt_interval_as_upstream_reads_it(monkeypatch: pytest.MonkeyPatch, value: str, seconds: float) -> None:
    from epp.autoscale.command import _interval_from_env

    monkeypatch.setenv("GLOBAL_OPT_INTERVAL", value)
    assert _interval_from_env() == seconds  # a unit and >= 1s, else 15s (upstream's fallback)


def test_upstream_environment_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "PROMETHEUS_BASE_URL": "https://prometheus:9090",
        "CONTROLLER_INSTANCE": "team-a",
        "WATCH_NAMESPACE": "llm",
        "PROMETHEUS_CA_CERT_PATH": "/ca.crt",
        "PROMETHEUS_CLIENT_CERT_PATH": "/tls.crt",
        "PROMETHEUS_CLIENT_KEY_PATH": "/tls.key",
        "PROMETHEUS_SERVER_NAME": "prometheus.monitoring",
        "PROMETHEUS_TOKEN_PATH": "/token",
        "PROMETHEUS_TLS_INSECURE_SKIP_VERIFY": "TRUE",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = parse()
    assert (args.prometheus_url, args.controller_instance, args.watch_namespace) == (
        "https://prometheus:9090",
        "team-a",
        "llm",
    )
    assert (args.prometheus_ca_cert, args.prometheus_client_cert, args.prometheus_client_key) == (
        "/ca.crt",
        "/tls.crt",
        "/tls.key",
    )
    assert (args.prometheus_server_name, args.prometheus_token_file) == ("prometheus.monitoring", "/token")
    assert args.prometheus_insecure_skip_verify
    monkeypatch.setenv("PROMETHEUS_TLS_INSECURE_SKIP_VERIFY", "yes")  # Go's ParseBool: not a true
    assert not parse().prometheus_insecure_skip_verify


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--prometheus-ca-cert", "/ca.crt"], {}, "--prometheus-ca-cert: only with --prometheus-url"),
        ([], {"PROMETHEUS_BEARER_TOKEN": "t"}, "PROMETHEUS_BEARER_TOKEN: only with --prometheus-url"),
        (
            ["--prometheus-url", "http://prometheus:9090"],
            {"PROMETHEUS_BEARER_TOKEN": "t"},
            "refusing to send a bearer token over plain http",
        ),
        (
            ["--prometheus-url", "https://prometheus:9090", "--prometheus-ca-cert", "/nowhere/ca.crt"],
            {},
            "cannot load a CA bundle from '/nowhere/ca.crt'",
        ),
    ],
)
async def test_prometheus_access_settings_are_checked_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert await run(parse(*argv)) == 2
    assert message in capsys.readouterr().err


async def test_limited_mode_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WVA_LIMITED_MODE", "true")
    assert await run(parse()) == 2
    assert "WVA_LIMITED_MODE=true: GPU inventory discovery from Nodes is not supported" in capsys.readouterr().err


async def _serving(run_args: argparse.Namespace, probe: Callable[[], Awaitable[bool]]) -> None:
    """Run the loop until ``probe`` holds, then stop it (exit 0)."""
    stop = asyncio.Event()
    task = start_guarded(run(run_args, stop=stop), name="test-autoscale-command")
    try:
        await wait_until(probe, timeout=10)
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0
    finally:
        await cancel_and_wait(task)


async def _status(url: str, *, tls: ssl.SSLContext | bool = True, token: str = "") -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with aiohttp.ClientSession() as http, http.get(url, ssl=tls, headers=headers) as resp:
            return resp.status
    except aiohttp.ClientError:
        return 0


async def test_metrics_over_https_with_client_certificates(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", server="epp-autoscaler", client="prometheus")
    port = free_port()
    url = f"https://127.0.0.1:{port}/metrics"
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        argv = ("--kubeconfig", str(api.kubeconfig), "--metrics-port", str(port))
        tls = ("--metrics-cert-dir", str(pki.server_dir), "--metrics-client-ca-file", str(pki.ca))

        async def served() -> bool:
            if await _status(url, tls=pki.client()) != 200:
                return False
            assert await _status(url, tls=pki.client(with_cert=False)) == 0  # no client certificate: no handshake
            assert await _status(f"http://127.0.0.1:{port}/metrics") == 0  # no plaintext
            return True

        await _serving(parse(*argv, *tls), served)


async def test_metrics_endpoint_auth_asks_the_api_server(epp_cluster: FakeCluster) -> None:
    reader = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prom", "namespace": "default"}}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "metrics-reader"},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "metrics-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prom", "namespace": "default"}],
    }
    nobody = {**reader, "metadata": {"name": "nobody", "namespace": "default"}}
    await epp_cluster.apply_all([reader, nobody, role, binding])
    token = (await epp_cluster.kubectl("create", "token", "prom")).strip()
    other = (await epp_cluster.kubectl("create", "token", "nobody")).strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    argv = ("--kubeconfig", str(epp_cluster.kubeconfig), "--metrics-port", str(port), "--metrics-endpoint-auth")

    async def served() -> bool:
        if await _status(url, token=token) != 200:
            return False
        assert await _status(url) == 401
        assert await _status(url, token=other) == 403  # authenticated, not allowed by RBAC
        return True

    await _serving(parse(*argv), served)


async def test_metrics_tls_settings_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(parse("--metrics-client-ca-file", "/ca.crt")) == 2
    assert "--metrics-client-ca-file requires --metrics-cert-dir" in capsys.readouterr().err
    assert await run(parse("--metrics-cert-dir", str(tmp_path))) == 2  # TLS with nothing checking the scraper
    assert "set --metrics-client-ca-file or --metrics-endpoint-auth" in capsys.readouterr().err
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        argv = ("--kubeconfig", str(api.kubeconfig), "--metrics-port", "0", "--metrics-endpoint-auth")
        assert await run(parse(*argv, "--metrics-cert-dir", str(tmp_path))) == 2
    assert f"--metrics-cert-dir {tmp_path}: cannot use tls.crt and tls.key" in capsys.readouterr().err
