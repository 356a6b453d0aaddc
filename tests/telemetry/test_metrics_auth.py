"""/metrics authentication as upstream does it: bearer token → TokenReview → SubjectAccessReview.

A real picker (``epp serve --metrics-endpoint-auth=true``) and a fake API server holding
ServiceAccounts and RBAC; tokens are minted by the real ``kubectl create token``; every request
is real HTTP. Upstream's answers (status and text), its caches (counted as reviews the API server
receives) and its failure modes are checked; the cache lifetimes run on a manual clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from epp.clock import ManualClock
from epp.kube.client import close_api, make_api
from epp.kube.reviews import KubeReviewer
from epp.telemetry.metrics_auth import MetricsAuth, Refusal, bearer_token
from epp_sim.pytest_plugin import PickerFactory
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.picker import InProcessPicker

TOKEN_REVIEWS = "POST /apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "POST /apis/authorization.k8s.io/v1/subjectaccessreviews"
STANDALONE = ("--endpoint-selector", "app=none", "--endpoint-target-ports", "8000")
RBAC = "rbac.authorization.k8s.io/v1"


def _account(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": "default"}}


def _grant(name: str, account: str, *urls: str) -> list[dict[str, Any]]:
    """A ClusterRole allowing GET on ``urls`` and its binding to ServiceAccount ``default/account``."""
    role = {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": name}}
    role["rules"] = [{"nonResourceURLs": list(urls), "verbs": ["get"]}]
    binding = {
        "apiVersion": RBAC,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "default"}],
    }
    return [role, binding]


@dataclass
class Guarded:
    """A picker with auth on, and kubectl-minted tokens: ``prom`` may read /metrics, ``nobody`` nothing."""

    cluster: FakeCluster
    picker: InProcessPicker
    tokens: dict[str, str]

    @property
    def base(self) -> str:
        return self.picker.metrics_url.removesuffix("/metrics")

    def reviews(self) -> tuple[int, int]:
        """(TokenReviews, SubjectAccessReviews) the API server has answered so far."""
        seen = list(self.cluster.server.recent_requests)
        return seen.count(TOKEN_REVIEWS), seen.count(ACCESS_REVIEWS)


async def _accounts(cluster: FakeCluster) -> dict[str, str]:
    await cluster.apply_all(
        [
            *(_account(n) for n in ("prom", "nobody", "profiler")),
            *_grant("metrics-reader", "prom", "/metrics"),
            *_grant("profile-reader", "profiler", "/debug/pprof/*"),
        ]
    )
    return {n: (await cluster.kubectl("create", "token", n)).strip() for n in ("prom", "nobody", "profiler")}


@pytest.fixture
async def guarded(epp_cluster: FakeCluster, epp_picker: PickerFactory) -> Guarded:
    tokens = await _accounts(epp_cluster)
    picker = await epp_picker(*STANDALONE, "--metrics-endpoint-auth=true")
    return Guarded(epp_cluster, picker, tokens)


async def _get(url: str, authorization: str | None = None, method: str = "GET") -> tuple[int, str, Any]:
    headers = {"Authorization": authorization} if authorization is not None else {}
    async with aiohttp.ClientSession() as http, http.request(method, url, headers=headers) as resp:
        return resp.status, await resp.text(), resp.headers


async def test_upstream_statuses_and_bodies(guarded: Guarded) -> None:
    base, t = guarded.base, guarded.tokens
    status, body, headers = await _get(f"{base}/metrics")
    assert (status, body) == (401, "Unauthorized\n")
    assert headers["Content-Type"] == "text/plain; charset=utf-8" and headers["X-Content-Type-Options"] == "nosniff"
    for refused in ("Basic cHJvbTpwYXNz", "Bearer", "Bearer ", f"Token {t['prom']}"):
        assert (await _get(f"{base}/metrics", refused))[:2] == (401, "Unauthorized\n"), refused
    assert (await _get(f"{base}/metrics", "Bearer not-a-token"))[:2] == (500, "Authentication failed\n")
    denied = (403, "Authorization denied for user system:serviceaccount:default:nobody\n")
    assert (await _get(f"{base}/metrics", f"Bearer {t['nobody']}"))[:2] == denied

    status, body, headers = await _get(f"{base}/metrics", f"bearer {t['prom']}")  # the scheme is case-insensitive
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE inference_pool_ready_pods gauge" in body

    prom_denied = (403, "Authorization denied for user system:serviceaccount:default:prom\n")
    assert (await _get(f"{base}/healthz", f"Bearer {t['prom']}"))[:2] == prom_denied  # every handler is guarded
    assert (await _get(f"{base}/metrics", f"Bearer {t['prom']}", method="POST"))[:2] == prom_denied  # verb post


async def test_pprof_answers_404_only_after_authentication(guarded: Guarded) -> None:
    base, t = guarded.base, guarded.tokens
    assert (await _get(f"{base}/debug/pprof/heap"))[:2] == (401, "Unauthorized\n")
    assert (await _get(f"{base}/debug/pprof/", f"Bearer {t['prom']}"))[0] == 403
    for path in ("/debug/pprof/", "/debug/pprof/profile"):
        assert (await _get(f"{base}{path}", f"Bearer {t['profiler']}"))[:2] == (404, "404 page not found\n")
    assert (await _get(f"{base}/elsewhere"))[:2] == (404, "404 page not found\n")  # no handler: no auth


async def test_reviews_are_cached_as_upstream(guarded: Guarded) -> None:
    base, t = guarded.base, guarded.tokens
    before = guarded.reviews()
    assert (await _get(f"{base}/metrics", f"Bearer {t['prom']}"))[0] == 200
    after_first = guarded.reviews()
    assert (after_first[0] - before[0], after_first[1] - before[1]) == (1, 1)
    for _ in range(3):
        assert (await _get(f"{base}/metrics", f"Bearer {t['prom']}"))[0] == 200
    assert guarded.reviews() == after_first  # token and allow both cached
    await _get(f"{base}/healthz", f"Bearer {t['prom']}")
    assert guarded.reviews() == (after_first[0], after_first[1] + 1)  # another path: only a new access review

    await _get(f"{base}/metrics", f"Bearer {t['nobody']}")
    denied_once = guarded.reviews()
    assert (await _get(f"{base}/metrics", f"Bearer {t['nobody']}"))[0] == 403
    assert guarded.reviews() == denied_once  # the deny is cached too
    for _ in range(2):
        await _get(f"{base}/metrics", "Bearer not-a-token")
    assert guarded.reviews()[0] == denied_once[0] + 2  # a review that reported an error is not kept


async def test_failed_reviews_answer_500_and_passing_failures_are_retried(guarded: Guarded) -> None:
    base, server, t = guarded.base, guarded.cluster.server, guarded.tokens
    # The picker lacks RBAC for the reviews (kr8s itself tries a 403 twice, so the rule stays until cleared).
    server.inject_error(403, path_prefix="/apis/authentication.k8s.io/v1/tokenreviews", times=None)
    assert (await _get(f"{base}/metrics", f"Bearer {t['prom']}"))[:2] == (500, "Authentication failed\n")
    server.clear_faults()
    server.inject_error(403, path_prefix="/apis/authorization.k8s.io/v1/subjectaccessreviews", times=None)
    failed = (500, "Authorization for user system:serviceaccount:default:prom failed\n")
    assert (await _get(f"{base}/metrics", f"Bearer {t['prom']}"))[:2] == failed
    server.clear_faults()

    before = guarded.reviews()
    server.inject_error(503, path_prefix="/apis/authentication.k8s.io/v1/tokenreviews")  # once, then fine
    assert (await _get(f"{base}/metrics", f"Bearer {t['nobody']}"))[0] == 403
    assert guarded.reviews()[0] == before[0] + 2


async def test_the_stack_refuses_to_wait_on_a_picker_that_wants_a_token(guarded: Guarded) -> None:
    with pytest.raises(PermissionError, match="--metrics-endpoint-auth=false"):
        await guarded.picker.wait_routing("any", 0, timeout=5)


def test_bearer_token_parsing_follows_upstream() -> None:
    assert bearer_token("Bearer abc") == bearer_token("  BEARER abc  ") == bearer_token("Bearer abc def") == "abc"
    assert [bearer_token(h) for h in ("", "Bearer", "Bearer ", "Bearer  abc", "Basic abc", "abc")] == [None] * 6


# --- cache lifetimes, on a manual clock -----------------------------------------------------------


@pytest.fixture
async def clocked_auth(epp_cluster: FakeCluster) -> AsyncIterator[tuple[MetricsAuth, ManualClock]]:
    api = await make_api(str(epp_cluster.kubeconfig))
    clock = ManualClock()
    try:
        yield MetricsAuth(KubeReviewer(api), clock=clock), clock
    finally:
        await close_api(api)


async def test_token_allow_and_deny_lifetimes(
    epp_cluster: FakeCluster, clocked_auth: tuple[MetricsAuth, ManualClock]
) -> None:
    auth, clock = clocked_auth
    tokens = await _accounts(epp_cluster)
    prom, nobody = f"Bearer {tokens['prom']}", f"Bearer {tokens['nobody']}"
    assert await auth.check("GET", "/metrics", prom) is None
    await epp_cluster.delete(RBAC, "ClusterRoleBinding", "metrics-reader")
    clock.advance(299)
    assert await auth.check("GET", "/metrics", prom) is None  # allowed 5 minutes
    clock.advance(1)
    assert await auth.check("GET", "/metrics", prom) == Refusal(
        403, "Authorization denied for user system:serviceaccount:default:prom"
    )

    assert await auth.check("GET", "/metrics", nobody) is not None
    await epp_cluster.apply_all(_grant("nobody-reads", "nobody", "/metrics"))
    clock.advance(29)
    assert await auth.check("GET", "/metrics", nobody) is not None  # denied 30 seconds
    clock.advance(1)
    assert await auth.check("GET", "/metrics", nobody) is None

    await epp_cluster.delete("v1", "ServiceAccount", "nobody", namespace="default")
    clock.advance(29)
    assert await auth.check("GET", "/metrics", nobody) is None  # the user is kept 1 minute from its review
    clock.advance(1)
    assert await auth.check("GET", "/metrics", nobody) == Refusal(500, "Authentication failed")


async def test_a_review_gives_up_after_the_timeout(epp_cluster: FakeCluster) -> None:
    tokens = await _accounts(epp_cluster)
    epp_cluster.server.inject_latency(1.0, path_prefix="/apis/authentication.k8s.io")
    api = await make_api(str(epp_cluster.kubeconfig))
    try:
        auth = MetricsAuth(KubeReviewer(api), clock=ManualClock(), timeout=0.2)
        assert await auth.check("GET", "/metrics", f"Bearer {tokens['prom']}") == Refusal(500, "Authentication failed")
    finally:
        await close_api(api)
