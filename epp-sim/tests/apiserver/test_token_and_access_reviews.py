"""Tokens and reviews: ``kubectl create token``, TokenReview, SubjectAccessReview, service-account-token Secrets.

Tokens are minted by the real kubectl (which sends its TokenRequest as protobuf) and reviewed
over HTTP, as a component delegating its auth would. The RBAC evaluation is checked case by case
against the rules of ``pkg/registry/rbac/validation`` (verbs, groups, resources and subresources,
resource names, non-resource URL wildcards, RoleBinding scope, subject kinds).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from apiserver_objects import pod

from epp.clock import ManualClock
from epp_sim.apiserver import ApiError, RunningApiServer, Store, running_apiserver
from epp_sim.apiserver.authorizer import Attributes, authorize
from epp_sim.apiserver.tokens import API_AUDIENCE
from epp_sim.stack.kubectl import Kubectl, KubectlError

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
PROM = "system:serviceaccount:default:prom"
SA_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]


async def _post(api: RunningApiServer, path: str, body: Any, content_type: str = "application/json") -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": content_type}
    async with aiohttp.ClientSession() as http, http.post(api.url + path, data=data, headers=headers) as resp:
        return resp.status, json.loads(await resp.read())


async def _review(api: RunningApiServer, token: str, audiences: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"token": token, **({"audiences": audiences} if audiences else {})}
    status, body = await _post(
        api, TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
    )
    assert status == 201, body
    result: dict[str, Any] = body["status"]
    return result


async def _may(api: RunningApiServer, spec: dict[str, Any]) -> dict[str, Any]:
    status, body = await _post(
        api, ACCESS_REVIEWS, {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    )
    assert status == 201, body
    result: dict[str, Any] = body["status"]
    return result


@pytest.fixture
async def clocked(tmp_path: Path) -> AsyncIterator[tuple[RunningApiServer, ManualClock, Kubectl]]:
    clock = ManualClock(wall_start=1_900_000_000.0)
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig", clock=clock) as api:
        api.server.store.create("ServiceAccount", {"metadata": {"name": "prom"}}, namespace="default")
        yield api, clock, Kubectl(api.kubeconfig, tmp_path / "home")


async def _token(kubectl: Kubectl, *args: str) -> str:
    return (await kubectl.run("create", "token", *args)).stdout.strip()


async def test_kubectl_create_token_is_reviewed_until_it_expires(
    clocked: tuple[RunningApiServer, ManualClock, Kubectl],
) -> None:
    api, clock, kubectl = clocked
    token = await _token(kubectl, "prom", "--duration", "20m")
    review = await _review(api, token)
    assert review["authenticated"] is True and review["audiences"] == [API_AUDIENCE]
    assert review["user"]["username"] == PROM and review["user"]["groups"] == SA_GROUPS
    account = api.server.store.get("ServiceAccount", "prom", namespace="default")
    assert review["user"]["uid"] == account["metadata"]["uid"]

    clock.advance(20 * 60 - 1)
    assert (await _review(api, token))["authenticated"] is True
    clock.advance(1)
    expired = await _review(api, token)
    assert "authenticated" not in expired and "has expired" in expired["error"]

    for garbage in ("nope", token[:-4] + "AAAA", token + "x"):
        assert "authenticated" not in await _review(api, garbage), garbage
    status, body = await _post(api, TOKEN_REVIEWS, {"kind": "TokenReview", "spec": {}})
    assert (status, body["message"]) == (400, "token is required for TokenReview in authentication")


async def test_audiences_the_service_account_and_refused_requests(
    clocked: tuple[RunningApiServer, ManualClock, Kubectl],
) -> None:
    api, _, kubectl = clocked
    scoped = await _token(kubectl, "prom", "--audience", "prometheus", "--audience", "other")
    assert "is invalid for the target audiences" in (await _review(api, scoped))["error"]
    assert (await _review(api, scoped, ["prometheus"]))["audiences"] == ["prometheus"]

    token = await _token(kubectl, "prom")
    store = api.server.store
    store.delete("ServiceAccount", "prom", namespace="default")
    assert "not found" in (await _review(api, token))["error"]
    store.create("ServiceAccount", {"metadata": {"name": "prom"}}, namespace="default")
    assert "does not match" in (await _review(api, token))["error"]  # a new account is not the old one

    with pytest.raises(KubectlError, match='serviceaccounts "ghost" not found'):
        await _token(kubectl, "ghost")
    with pytest.raises(KubectlError, match="may not specify a duration less than 10 minutes"):
        await _token(kubectl, "prom", "--duration", "5m")
    token_url = "/api/v1/namespaces/default/serviceaccounts/prom/token"
    status, body = await _post(api, token_url, b"k8s\x00\x0a\xff", "application/vnd.kubernetes.protobuf")
    assert status == 400 and "not a valid Kubernetes protobuf envelope: truncated" in body["message"]
    for spec in (["x"], {"expirationSeconds": "1h"}, {"boundObjectRef": "pod"}):
        status, body = await _post(api, token_url, {"kind": "TokenRequest", "spec": spec})
        assert status == 400, spec
    async with aiohttp.ClientSession() as http, http.get(api.url + TOKEN_REVIEWS) as resp:
        assert resp.status == 405  # a review is created, never listed


async def test_a_pod_bound_token_dies_with_its_pod(clocked: tuple[RunningApiServer, ManualClock, Kubectl]) -> None:
    api, _, kubectl = clocked
    store = api.server.store
    created = store.create("Pod", pod("vllm-0", serviceAccountName="prom"), namespace="default")
    token = await _token(kubectl, "prom", "--bound-object-kind", "Pod", "--bound-object-name", "vllm-0")
    user = (await _review(api, token))["user"]
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["vllm-0"]
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [created["metadata"]["uid"]]
    store.delete("Pod", "vllm-0", namespace="default", grace_period_seconds=0)
    assert "vllm-0" in (await _review(api, token))["error"]

    store.create("Pod", pod("other"), namespace="default")  # runs as "default"
    with pytest.raises(KubectlError, match="different serviceaccount name"):
        await _token(kubectl, "prom", "--bound-object-kind", "Pod", "--bound-object-name", "other")
    with pytest.raises(KubectlError, match='pods "missing" not found'):
        await _token(kubectl, "prom", "--bound-object-kind", "Pod", "--bound-object-name", "missing")


async def test_a_service_account_token_secret_gets_a_token_valid_while_it_exists(
    clocked: tuple[RunningApiServer, ManualClock, Kubectl], tmp_path: Path
) -> None:
    api, clock, kubectl = clocked
    secrets = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "prom-token",
                "namespace": "default",
                "annotations": {"kubernetes.io/service-account.name": "prom"},
            },
            "type": "kubernetes.io/service-account-token",
        },
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "plain"}, "stringData": {"a": "b"}},
    ]
    manifest = tmp_path / "secrets.yaml"
    manifest.write_text(yaml.safe_dump_all(secrets))
    await kubectl.run("apply", "-f", str(manifest))
    assert "unchanged" in (await kubectl.run("apply", "-f", str(manifest))).stdout  # the token stays
    table = (await kubectl.run("get", "secrets")).stdout.split()
    assert table[:4] == ["NAME", "TYPE", "DATA", "AGE"] and "kubernetes.io/service-account-token" in table

    store = api.server.store
    assert store.get("Secret", "plain", namespace="default")["data"] == {"a": base64.b64encode(b"b").decode()}
    data = store.get("Secret", "prom-token", namespace="default")["data"]
    token = base64.b64decode(data["token"]).decode()
    assert base64.b64decode(data["namespace"]) == b"default"
    clock.advance(400 * 24 * 3600)  # never expires
    review = await _review(api, token)
    assert review["authenticated"] is True and review["user"]["username"] == PROM

    with pytest.raises(ApiError) as refused:
        store.create("Secret", {"metadata": {"name": "x"}, "type": "kubernetes.io/service-account-token"})
    assert refused.value.code == 422 and "kubernetes.io/service-account.name" in refused.value.message
    with pytest.raises(ApiError, match="field is immutable"):
        store.patch("Secret", "plain", {"type": "kubernetes.io/tls"}, namespace="default")
    store.delete("Secret", "prom-token", namespace="default")
    assert "prom-token" in (await _review(api, token))["error"]


async def test_subject_access_reviews_over_http(clocked: tuple[RunningApiServer, ManualClock, Kubectl]) -> None:
    api, _, _ = clocked
    store = api.server.store
    ask = {"user": PROM, "groups": SA_GROUPS, "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    assert await _may(api, ask) == {"allowed": False}
    store.create(
        "ClusterRole", {"metadata": {"name": "reader"}, "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}
    )
    store.create(
        "ClusterRoleBinding",
        {
            "metadata": {"name": "prom-reads"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "prom", "namespace": "default"}],
        },
    )
    assert await _may(api, ask) == {
        "allowed": True,
        "reason": 'RBAC: allowed by ClusterRoleBinding "prom-reads" of ClusterRole "reader" to ServiceAccount '
        '"prom/default"',
    }
    assert (await _may(api, {**ask, "nonResourceAttributes": {"path": "/metrics", "verb": "post"}}))["allowed"] is False

    store.delete("ClusterRole", "reader")
    assert await _may(api, ask) == {
        "allowed": False,
        "reason": 'RBAC: clusterroles.rbac.authorization.k8s.io "reader" not found',
    }
    status, body = await _post(api, ACCESS_REVIEWS, {"kind": "SubjectAccessReview", "spec": {}})
    assert status == 422
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.resourceAttributes", "spec.user"]
    both = {"user": "u", "resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"verb": "get"}}
    status, body = await _post(api, ACCESS_REVIEWS, {"kind": "SubjectAccessReview", "spec": both})
    assert status == 422 and "cannot be specified in combination" in body["message"]


async def test_discovery_and_openapi_list_the_review_apis(apiserver: RunningApiServer) -> None:
    async with aiohttp.ClientSession(apiserver.url) as http:

        async def get(path: str) -> Any:
            async with http.get(path) as resp:
                assert resp.status == 200, path
                return json.loads(await resp.read())

        core = {r["name"]: r for r in (await get("/api/v1"))["resources"]}
        assert core["serviceaccounts/token"] == {
            "name": "serviceaccounts/token",
            "singularName": "",
            "namespaced": True,
            "group": "authentication.k8s.io",
            "version": "v1",
            "kind": "TokenRequest",
            "verbs": ["create"],
        }
        assert (core["secrets"]["kind"], core["secrets"]["namespaced"]) == ("Secret", True)
        for group, plural, kind in (
            ("authentication.k8s.io", "tokenreviews", "TokenReview"),
            ("authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview"),
        ):
            (entry,) = (await get(f"/apis/{group}/v1"))["resources"]
            assert (entry["name"], entry["kind"], entry["namespaced"], entry["verbs"]) == (
                plural,
                kind,
                False,
                ["create"],
            )
            doc = await get((await get("/openapi/v3"))["paths"][f"apis/{group}/v1"]["serverRelativeURL"])
            assert list(doc["paths"]) == [f"/apis/{group}/v1/{plural}"]
            assert list(doc["paths"][f"/apis/{group}/v1/{plural}"]) == ["post"]


# --- RBAC evaluation, rule by rule ------------------------------------------------------------------


def _rbac(store: Store, *objects: dict[str, Any]) -> None:
    for o in objects:
        store.create(o["kind"], o, namespace=o["metadata"].get("namespace"))


def _binding(
    kind: str, name: str, role_kind: str, role: str, *subjects: dict[str, str], ns: str = ""
) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role}
    return {"kind": kind, "metadata": meta, "roleRef": ref, "subjects": list(subjects)}


def _role(kind: str, name: str, *rules: dict[str, Any], ns: str = "") -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, **({"namespace": ns} if ns else {})}, "rules": list(rules)}


def _url(path: str, verb: str = "get", user: str = PROM, groups: tuple[str, ...] = tuple(SA_GROUPS)) -> Attributes:
    return Attributes(user, groups, verb, resource_request=False, path=path)


def _res(resource: str, *, verb: str = "get", ns: str = "default", group: str = "", sub: str = "", name: str = "",
         user: str = PROM, groups: tuple[str, ...] = tuple(SA_GROUPS)) -> Attributes:  # fmt: skip
    return Attributes(
        user, groups, verb, resource_request=True, namespace=ns, group=group, resource=resource, subresource=sub,
        name=name,
    )  # fmt: skip


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    s = Store()
    yield s
    await s.aclose()


async def test_non_resource_urls_exact_prefix_and_star(store: Store) -> None:
    sa = {"kind": "ServiceAccount", "name": "prom", "namespace": "default"}
    _rbac(
        store,
        _role("ClusterRole", "urls", {"nonResourceURLs": ["/metrics", "/debug/pprof/*"], "verbs": ["get"]}),
        _role("ClusterRole", "all", {"nonResourceURLs": ["*"], "verbs": ["*"]}),
        _binding("ClusterRoleBinding", "urls", "ClusterRole", "urls", sa),
        _binding("ClusterRoleBinding", "all", "ClusterRole", "all", {"kind": "User", "name": "root"}),
    )
    allowed = {
        (path, verb): authorize(store, _url(path, verb)).allowed
        for path in ("/metrics", "/metrics/", "/debug/pprof/", "/debug/pprof/heap", "/debug/pprof", "/healthz")
        for verb in ("get", "post")
    }
    assert {k for k, v in allowed.items() if v} == {
        ("/metrics", "get"),
        ("/debug/pprof/", "get"),
        ("/debug/pprof/heap", "get"),
    }
    assert authorize(store, _url("/anything", "delete", user="root", groups=())).allowed
    assert authorize(store, _url("/x", user="nobody", groups=("system:masters",))).allowed
    assert not authorize(store, _url("/metrics", user="system:serviceaccount:other:prom")).allowed


async def test_resource_rules_and_the_scope_of_role_bindings(store: Store) -> None:
    for ns in ("team", "elsewhere"):
        store.create("Namespace", {"metadata": {"name": ns}})
    readers = {"kind": "Group", "name": "readers"}
    local_sa = {"kind": "ServiceAccount", "name": "prom"}  # a RoleBinding's subject defaults to its namespace
    _rbac(
        store,
        _role(
            "Role", "pods", {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}, ns="team"
        ),
        _role("ClusterRole", "scale", {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["update"]}),
        _role(
            "ClusterRole",
            "one-config",
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"], "verbs": ["*"]},
        ),
        _binding("RoleBinding", "pods", "Role", "pods", local_sa, ns="team"),
        _binding("RoleBinding", "scale", "ClusterRole", "scale", readers, ns="team"),
        _binding("ClusterRoleBinding", "one-config", "ClusterRole", "one-config", readers),
    )
    team = "system:serviceaccount:team:prom"
    assert authorize(store, _res("pods", ns="team", user=team)).reason == (
        'RBAC: allowed by RoleBinding "pods/team" of Role "pods" to ServiceAccount "prom/team"'
    )
    assert authorize(store, _res("pods", ns="team", sub="log", user=team)).allowed
    assert not authorize(store, _res("pods", ns="team", sub="exec", user=team)).allowed
    assert not authorize(store, _res("pods", ns="team", verb="delete", user=team)).allowed
    assert not authorize(store, _res("pods", ns="elsewhere", user=team)).allowed  # a RoleBinding stays home
    assert not authorize(store, _res("pods", ns="team")).allowed  # default/prom is someone else

    member = ("readers",)
    assert authorize(
        store, _res("deployments", ns="team", group="apps", sub="scale", verb="update", groups=member)
    ).allowed
    assert not authorize(store, _res("deployments", ns="team", group="apps", verb="update", groups=member)).allowed
    assert not authorize(
        store, _res("deployments", ns="team", group="", sub="scale", verb="update", groups=member)
    ).allowed
    assert authorize(store, _res("configmaps", ns="elsewhere", name="cfg", verb="patch", groups=member)).allowed
    assert not authorize(store, _res("configmaps", ns="elsewhere", name="other", groups=member)).allowed
    assert not authorize(store, _res("configmaps", ns="elsewhere", groups=member)).allowed  # a list names none
