"""The ``epp.v1`` API as an operator probes it: grpcurl ``list``, ``describe`` and each method.

A real picker (``epp serve`` in-process, plaintext health port) over simulated pods; grpcurl (which
prints the proto's field names, 64-bit integers as strings) is
the real binary, relying on reflection alone (no proto files given). With
``--metrics-endpoint-auth=true`` the API asks the ``/metrics`` authorizer: no token is refused,
a token whose account may ``post`` on ``/epp.v1.*`` passes, while health stays open. With
``--metrics-cert-dir`` the API moves to its own port behind the metrics TLS (a throwaway CA,
real handshakes), while the health port stays plaintext and carries only health.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pool_modes import ALL_MODES, served

from epp_sim.kube_objects import PoolMode
from epp_sim.pki import Pki, make_pki
from epp_sim.pytest_plugin import PickerFactory, PoolFactory
from epp_sim.stack.cluster import FakeCluster

GRPCURL = Path(sys.executable).parent / "grpcurl"
RBAC = "rbac.authorization.k8s.io/v1"
STANDALONE = ("--endpoint-selector", "app=none", "--endpoint-target-ports", "8000")


async def grpcurl(*args: str, plaintext: bool = True) -> tuple[int, str]:
    options = ("-plaintext",) if plaintext else ()
    proc = await asyncio.create_subprocess_exec(
        str(GRPCURL), *options, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def call(target: str, method: str, data: dict[str, Any], *extra: str, plaintext: bool = True) -> dict[str, Any]:
    rc, out = await grpcurl(*extra, "-d", json.dumps(data), target, method, plaintext=plaintext)
    assert rc == 0, out
    answer: dict[str, Any] = json.loads(out)
    return answer


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_grpcurl_lists_describes_and_calls_each_method(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=2, objects=served(mode, "m"))
    await env.set_pins([{"waiting": 1}, {"waiting": 4}])
    target = env.picker.health_target

    rc, listed = await grpcurl(target, "list")
    assert rc == 0, listed
    assert set(listed.split()) >= {"epp.v1.Config", "epp.v1.Endpoints", "epp.v1.Explain", "grpc.health.v1.Health"}
    rc, described = await grpcurl(target, "describe", "epp.v1.Explain")
    assert rc == 0 and "rpc Explain ( .epp.v1.ExplainRequest ) returns ( .epp.v1.ExplainResponse )" in described
    rc, message = await grpcurl(target, "describe", "epp.v1.EndpointScores")
    assert rc == 0 and "repeated .epp.v1.Score scores" in message, message

    listing = await call(target, "epp.v1.Endpoints/ListEndpoints", {})
    (pool,) = listing["pools"]
    assert pool["synced"] is True and pool["metrics_staleness_threshold_seconds"] == 2
    by_address = {e["address"]: e for e in pool["endpoints"]}
    assert set(by_address) == {env.hostport(0), env.hostport(1)}
    first = by_address[env.hostport(0)]
    assert first["health"] == "healthy" and first["metrics"]["waiting_queue"] == "1"
    assert "metrics_stale" not in first  # false is left out of grpcurl's JSON
    assert 0 <= first["metrics_age_seconds"] < 2 and first["engine"] == "vllm"
    assert 0 < first["scrape_interval_seconds"] < 2  # the harness scrapes every 20 ms
    assert pool["prefix_index_sizes"] == {"approx-prefix-cache-producer": "0"}  # the default config's index

    config = await call(target, "epp.v1.Config/GetConfig", {})
    assert config["source"] == "default" and config["generation"] == "1"
    assert config["last_reload"] == {"successful": True}  # not watched: the default config
    (pool_config,) = config["pools"]
    assert "kind: EndpointPickerConfig" in pool_config["yaml"] and len(pool_config["sha256"]) == 64

    body = json.dumps({"model": "m", "prompt": "hello"})
    explained = await call(target, "epp.v1.Explain/Explain", {"body": _b64(body)})
    assert explained["model"] == explained["target_model"] == "m"
    assert explained["picked"] == [env.hostport(0)]  # the shorter queue wins under the default scorers
    assert explained["admission"]["verdict"] == "ADMITTED"
    (profile,) = explained["profiles"]
    assert {e["address"] for e in profile["endpoints"]} == {env.hostport(0), env.hostport(1)}

    rc, unknown = await grpcurl("-d", '{"pool": "nope"}', target, "epp.v1.Endpoints/ListEndpoints")
    assert rc != 0 and "NotFound" in unknown and "'nope' is not served" in unknown
    rc, empty = await grpcurl("-d", "{}", target, "epp.v1.Explain/Explain")
    assert rc != 0 and "InvalidArgument" in empty


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


async def test_the_api_is_off_with_its_flag(epp_picker: PickerFactory) -> None:
    picker = await epp_picker(*STANDALONE, "--epp-api=false")
    rc, listed = await grpcurl(picker.health_target, "list")
    assert rc == 0 and "epp.v1" not in listed and "grpc.health.v1.Health" in listed


def _api_caller(account: str) -> list[dict[str, Any]]:
    """ServiceAccount ``account`` allowed ``post`` on every epp.v1 method (a ClusterRole and its binding)."""
    name = f"{account}-epp-api"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": "default"}},
        {
            "apiVersion": RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"nonResourceURLs": ["/epp.v1.*"], "verbs": ["post"]}],
        },
        {
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "default"}],
        },
    ]


async def test_the_api_asks_the_metrics_authorizer(epp_cluster: FakeCluster, epp_picker: PickerFactory) -> None:
    await epp_cluster.apply_all(
        [*_api_caller("operator"), {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}}]
    )
    operator = (await epp_cluster.kubectl("create", "token", "operator")).strip()
    nobody = (await epp_cluster.kubectl("create", "token", "nobody")).strip()
    picker = await epp_picker(*STANDALONE, "--metrics-endpoint-auth=true")
    target, method = picker.health_target, "epp.v1.Config/GetConfig"

    rc, out = await grpcurl("-d", "{}", target, method)
    assert rc != 0 and "Unauthenticated" in out and "Unauthorized" in out
    rc, out = await grpcurl("-H", f"authorization: Bearer {nobody}", "-d", "{}", target, method)
    assert rc != 0 and "PermissionDenied" in out and "Authorization denied for user" in out
    rc, out = await grpcurl("-H", "authorization: Bearer not-a-token", "-d", "{}", target, method)
    assert rc != 0 and "Internal" in out and "Authentication failed" in out
    allowed = await call(target, method, {}, "-H", f"authorization: Bearer {operator}")
    assert allowed["source"] == "default"
    rc, out = await grpcurl("-d", '{"service": "liveness"}', target, "grpc.health.v1.Health/Check")
    assert rc == 0 and "SERVING" in out  # kubelet's probes carry no token


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("api-pki"), server="epp-api", client="operator")


async def _operator_token(cluster: FakeCluster) -> str:
    await cluster.apply_all(_api_caller("operator"))
    return (await cluster.kubectl("create", "token", "operator")).strip()


async def test_the_api_follows_metrics_tls_and_client_certificates_onto_its_own_port(
    pki: Pki, epp_cluster: FakeCluster, epp_picker: PickerFactory
) -> None:
    token = await _operator_token(epp_cluster)
    picker = await epp_picker(
        *STANDALONE,
        "--metrics-endpoint-auth=true",
        f"--metrics-cert-dir={pki.server_dir}",
        f"--metrics-client-ca-file={pki.ca}",
    )
    target = picker.api_target
    assert picker.runtime.ports.api not in (0, picker.runtime.ports.health)
    tls = ("-cacert", str(pki.ca), "-cert", str(pki.client_cert), "-key", str(pki.client_key))
    bearer = ("-H", f"authorization: Bearer {token}")

    rc, listed = await grpcurl(*tls, target, "list", plaintext=False)
    assert rc == 0, listed
    assert set(listed.split()) >= {"epp.v1.Config", "epp.v1.Endpoints", "epp.v1.Explain"}
    rc, described = await grpcurl(*tls, target, "describe", "epp.v1.Explain", plaintext=False)
    assert rc == 0 and "rpc Explain ( .epp.v1.ExplainRequest ) returns ( .epp.v1.ExplainResponse )" in described
    config = await call(target, "epp.v1.Config/GetConfig", {}, *tls, *bearer, plaintext=False)
    assert config["source"] == "default"
    listing = await call(target, "epp.v1.Endpoints/ListEndpoints", {}, *tls, *bearer, plaintext=False)
    assert [p["name"] for p in listing["pools"]] == [picker.runtime.pools[0].key[1]]
    body = {"body": _b64(json.dumps({"model": "m", "prompt": "hi"}))}
    explained = await call(target, "epp.v1.Explain/Explain", body, *tls, *bearer, plaintext=False)
    assert explained["model"] == "m"  # no pods: the failure a client would get, not an error

    rc, out = await grpcurl(*tls, "-d", "{}", target, "epp.v1.Config/GetConfig", plaintext=False)
    assert rc != 0 and "Unauthenticated" in out  # a client certificate is not a token
    rc, out = await grpcurl(
        "-cacert", str(pki.ca), *bearer, "-d", "{}", target, "epp.v1.Config/GetConfig", plaintext=False
    )
    assert rc != 0 and "Failed to dial" in out, out  # the handshake wants a certificate the CA signed
    rc, out = await grpcurl(target, "list")
    assert rc != 0 and "Failed to dial" in out, out  # no plaintext on the API port

    rc, listed = await grpcurl(picker.health_target, "list")
    assert rc == 0 and "grpc.health.v1.Health" in listed and "epp.v1" not in listed
    rc, out = await grpcurl("-d", '{"service": "liveness"}', picker.health_target, "grpc.health.v1.Health/Check")
    assert rc == 0 and "SERVING" in out  # kubelet's plaintext probes


async def test_the_api_over_metrics_tls_without_client_certificates(
    pki: Pki, epp_cluster: FakeCluster, epp_picker: PickerFactory
) -> None:
    token = await _operator_token(epp_cluster)
    picker = await epp_picker(*STANDALONE, "--metrics-endpoint-auth=true", f"--metrics-cert-dir={pki.server_dir}")
    answer = await call(
        picker.api_target,
        "epp.v1.Config/GetConfig",
        {},
        "-cacert",
        str(pki.ca),
        "-H",
        f"authorization: Bearer {token}",
        plaintext=False,
    )
    assert answer["source"] == "default"
    rc, out = await grpcurl("-insecure", "-d", "{}", picker.api_target, "epp.v1.Config/GetConfig", plaintext=False)
    assert rc != 0 and "Unauthenticated" in out  # TLS alone does not pass the /metrics authorizer
