"""ServiceAccounts and the RBAC kinds: discovery, OpenAPI and tables, and the real server's write rules.

The rules come from ``pkg/apis/rbac/validation``: rules need verbs and either resources with API
groups or (ClusterRoles only) non-resource URLs; bindings default and check roleRef and subjects,
and a roleRef can never change; RBAC names are URL path segments (``system:…``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from apiserver_objects import binding, role

from epp_sim.apiserver import ApiError, RunningApiServer, Store

RBAC = "rbac.authorization.k8s.io"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    s = Store()
    yield s
    await s.aclose()


def _invalid(store: Store, kind: str, obj: dict[str, Any], **kwargs: Any) -> list[tuple[str, str]]:
    """(field, message) of each cause of the 422 that writing ``obj`` must raise."""
    with pytest.raises(ApiError) as info:
        store.create(kind, obj, **kwargs)
    assert (info.value.code, info.value.reason) == (422, "Invalid"), info.value.message
    assert info.value.details is not None
    return [(c["field"], c["message"]) for c in info.value.details["causes"]]


async def test_discovery_openapi_and_tables(apiserver: RunningApiServer) -> None:
    async with aiohttp.ClientSession(apiserver.url) as http:

        async def get(path: str, accept: str = "application/json") -> Any:
            async with http.get(path, headers={"Accept": accept}) as resp:
                assert resp.status == 200, path
                return json.loads(await resp.read())

        core = {r["name"]: r for r in (await get("/api/v1"))["resources"]}
        assert core["serviceaccounts"]["shortNames"] == ["sa"] and core["serviceaccounts"]["namespaced"] is True
        assert RBAC in {g["name"] for g in (await get("/apis"))["groups"]}
        rbac = {r["name"]: (r["kind"], r["namespaced"]) for r in (await get(f"/apis/{RBAC}/v1"))["resources"]}
        assert rbac == {
            "roles": ("Role", True),
            "rolebindings": ("RoleBinding", True),
            "clusterroles": ("ClusterRole", False),
            "clusterrolebindings": ("ClusterRoleBinding", False),
        }

        doc = await get((await get("/openapi/v3"))["paths"][f"apis/{RBAC}/v1"]["serverRelativeURL"])
        schemas = doc["components"]["schemas"]
        rb = schemas["io.k8s.api.rbac.v1.RoleBinding"]
        assert rb["required"] == ["roleRef"] and rb["properties"]["roleRef"]["required"] == ["apiGroup", "kind", "name"]
        assert rb["x-kubernetes-group-version-kind"] == [{"group": RBAC, "version": "v1", "kind": "RoleBinding"}]
        assert schemas["io.k8s.api.rbac.v1.ClusterRole"]["properties"]["rules"]["items"]["required"] == ["verbs"]
        assert f"/apis/{RBAC}/v1/clusterroles/{{name}}" in doc["paths"]
        assert f"/apis/{RBAC}/v1/namespaces/{{namespace}}/roles/{{name}}" in doc["paths"]
        core_doc = await get((await get("/openapi/v3"))["paths"]["api/v1"]["serverRelativeURL"])
        assert "io.k8s.api.core.v1.ServiceAccount" in core_doc["components"]["schemas"]

        store = apiserver.server.store
        store.create("ServiceAccount", {"metadata": {"name": "epp"}, "secrets": [{"name": "tok"}]}, namespace="default")
        store.create("Role", role("reader"), namespace="default")
        rolebinding = binding("reader", "reader")
        rolebinding["subjects"].append({"kind": "User", "name": "alice"})
        store.create("RoleBinding", rolebinding, namespace="default")
        sa_table = await get("/api/v1/namespaces/default/serviceaccounts", TABLE)
        assert [c["name"] for c in sa_table["columnDefinitions"]] == ["Name", "Secrets", "Age"]
        assert sa_table["rows"][0]["cells"][:2] == ["epp", 1]
        role_table = await get(f"/apis/{RBAC}/v1/namespaces/default/roles", TABLE)
        assert [c["name"] for c in role_table["columnDefinitions"]] == ["Name", "Created At"]
        assert role_table["rows"][0]["cells"][1].endswith("Z")
        rb_table = await get(f"/apis/{RBAC}/v1/namespaces/default/rolebindings", TABLE)
        columns = [(c["name"], c["priority"]) for c in rb_table["columnDefinitions"]]
        assert columns == [("Name", 0), ("Role", 0), ("Age", 0), ("Users", 1), ("Groups", 1), ("ServiceAccounts", 1)]
        cells = rb_table["rows"][0]["cells"]
        assert (cells[0], cells[1], cells[3:]) == ("reader", "Role/reader", ["alice", "", "default/epp"])


async def test_rules_need_verbs_and_resources_or_cluster_wide_urls(store: Store) -> None:
    created = store.create("Role", role("reader"), namespace="default")
    assert created["rules"][0]["verbs"] == ["get", "list", "watch"] and "generation" not in created["metadata"]
    assert _invalid(store, "Role", role("r0", apiGroups=[""], resources=["pods"]), namespace="default") == [
        ("rules[0].verbs", "Required value")  # the schema's required
    ]
    assert _invalid(store, "Role", role("r1", apiGroups=[""], resources=["pods"], verbs=[]), namespace="default") == [
        ("rules[0].verbs", "Required value: verbs must contain at least one value")
    ]
    assert _invalid(store, "Role", role("r2", verbs=["get"], resources=["pods"]), namespace="default") == [
        ("rules[0].apiGroups", "Required value: resource rules must supply at least one api group")
    ]
    assert _invalid(store, "Role", role("r3", verbs=["get"], nonResourceURLs=["/metrics"]), namespace="default") == [
        ("rules[0].nonResourceURLs", 'Invalid value: ["/metrics"]: namespaced rules cannot apply to non-resource URLs')
    ]
    store.create("ClusterRole", role("metrics-reader", cluster=True, verbs=["get"], nonResourceURLs=["/metrics"]))
    mixed = role("mixed", cluster=True, verbs=["get"], nonResourceURLs=["/metrics"], resources=["pods"])
    assert [field for field, _ in _invalid(store, "ClusterRole", mixed)] == ["rules[0].nonResourceURLs"]
    # RBAC names are path segments; ServiceAccount names stay DNS subdomains.
    assert store.create("ClusterRole", role("system:auth-delegator", cluster=True))["metadata"]["name"]
    assert _invalid(store, "ClusterRole", role("50%", cluster=True)) == [
        ("metadata.name", "Invalid value: '50%': may not contain '%'")
    ]
    assert _invalid(store, "ServiceAccount", {"metadata": {"name": "system:epp"}}, namespace="default")[0][0] == (
        "metadata.name"
    )
    assert store.get("ClusterRole", "metrics-reader")["metadata"].get("namespace") is None  # cluster-scoped


async def test_bindings_default_check_subjects_and_never_change_role_ref(store: Store) -> None:
    rb = binding("reader", "reader")
    del rb["roleRef"]["apiGroup"]
    rb["subjects"] = [{"kind": "ServiceAccount", "name": "epp"}, {"kind": "Group", "name": "devs"}]
    created = store.create("RoleBinding", rb, namespace="default")
    assert created["roleRef"]["apiGroup"] == RBAC  # defaulted, as rbac/v1 does
    assert created["subjects"][1] == {"kind": "Group", "name": "devs", "apiGroup": RBAC}
    assert "apiGroup" not in created["subjects"][0]

    crb = binding("crb", "reader", cluster=True, role_kind="Role")
    crb["subjects"] = [{"kind": "ServiceAccount", "name": "epp"}, {"kind": "Robot", "name": "r2"}]
    assert _invalid(store, "ClusterRoleBinding", crb) == [
        ("roleRef.kind", 'Unsupported value: "Role": supported values: "ClusterRole"'),
        ("subjects[0].namespace", "Required value"),
        ("subjects[1].kind", 'Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"'),
    ]
    no_ref = binding("no-ref", "reader")
    del no_ref["roleRef"]
    assert _invalid(store, "RoleBinding", no_ref, namespace="default") == [("roleRef", "Required value")]

    moved = store.patch("RoleBinding", "reader", {"subjects": [{"kind": "User", "name": "alice"}]}, namespace="default")
    assert moved["subjects"] == [{"kind": "User", "name": "alice", "apiGroup": RBAC}]
    with pytest.raises(ApiError) as info:
        store.patch("RoleBinding", "reader", {"roleRef": {"kind": "ClusterRole", "name": "view"}}, namespace="default")
    assert info.value.code == 422 and "roleRef: Invalid value: " in info.value.message
    assert info.value.message.endswith("cannot change roleRef")
    replaced = {**moved, "roleRef": {**moved["roleRef"], "name": "writer"}}
    with pytest.raises(ApiError) as info:
        store.update("RoleBinding", replaced, namespace="default")
    assert info.value.code == 422
    assert store.get("RoleBinding", "reader", namespace="default")["roleRef"]["name"] == "reader"


async def test_strict_decoding_names_unknown_fields(store: Store) -> None:
    bogus_rule = role("r", apiGroups=[""], resources=["pods"], verbs=["get"], bogus=True)
    with pytest.raises(ApiError) as info:
        store.create("Role", bogus_rule, namespace="default", strict=True)
    assert (info.value.code, info.value.message) == (
        400,
        'Role in version "v1" cannot be handled as a Role: strict decoding error: unknown field "rules[0].bogus"',
    )
    with pytest.raises(ApiError) as info:
        store.create("ServiceAccount", {"metadata": {"name": "epp"}, "token": "x"}, namespace="default", strict=True)
    assert info.value.code == 400 and 'unknown field "token"' in info.value.message
    rb = binding("rb", "reader", cluster=True)
    rb["roleRef"]["namespace"] = "default"
    with pytest.raises(ApiError) as info:
        store.create("ClusterRoleBinding", rb, strict=True)
    assert 'unknown field "roleRef.namespace"' in info.value.message
