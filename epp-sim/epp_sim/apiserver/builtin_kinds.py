"""The built-in resources: names, scope, subresources, table columns and kind-specific rules.

``builtin_types()`` returns fresh ``ResourceType``s for namespaces, pods, configmaps, secrets,
services, service accounts, deployments, replicasets, leases, RBAC roles and bindings, the token
and access reviews, and CRDs. Each ``_prepare_*`` (and ``epp_sim.apiserver.rbac``,
``epp_sim.apiserver.secret_writes``) does what the real registry strategy does on write (defaults
the schema cannot express, cross-field validation, immutable fields); each ``_row_*`` computes the
cells ``kubectl get`` prints.
"""

from __future__ import annotations

import zlib
from typing import Any

from epp.labels import SelectorError, selector_from_object
from epp_sim.apiserver.autoscaling_kinds import autoscaling_types
from epp_sim.apiserver.builtin_schemas import RBAC_GROUP, SCHEMAS
from epp_sim.apiserver.crds import prepare_crd
from epp_sim.apiserver.kinds import Column, Obj, ResourceType, ScaleSpec
from epp_sim.apiserver.rbac import (
    prepare_cluster_role,
    prepare_cluster_role_binding,
    prepare_role,
    prepare_role_binding,
)
from epp_sim.apiserver.reviews import review_types
from epp_sim.apiserver.secret_writes import prepare_secret
from epp_sim.apiserver.timefmt import human_age, parse_time

__all__ = ["builtin_types"]

Cause = tuple[str, str, str]
_AGE = Column("Age", "string", description="CreationTimestamp")


def _age(o: Obj, now: float) -> str:
    created = parse_time(str(o.get("metadata", {}).get("creationTimestamp", "")))
    return "<unknown>" if created is None else human_age(now - created)


def _row_pod(o: Obj, now: float) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for c in statuses:
        waiting = (c.get("state") or {}).get("waiting") or {}
        terminated = (c.get("state") or {}).get("terminated") or {}
        if waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated.get("reason"):
            reason = terminated["reason"]
    if (o.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    gates = spec.get("readinessGates") or []
    return [
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        restarts,
        _age(o, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"{len(gates)}/{len(gates)}" if gates else "<none>",
    ]


def _containers(o: Obj) -> list[Obj]:
    return list((((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [])


def _selector_text(o: Obj) -> str:
    try:
        return str(selector_from_object((o.get("spec") or {}).get("selector"))) or "<none>"
    except SelectorError:
        return "<invalid>"


def _row_deployment(o: Obj, now: float) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    cs = _containers(o)
    return [
        f"{status.get('readyReplicas') or 0}/{spec.get('replicas', 1)}",
        status.get("updatedReplicas") or 0,
        status.get("availableReplicas") or 0,
        _age(o, now),
        ",".join(str(c.get("name")) for c in cs),
        ",".join(str(c.get("image")) for c in cs),
        _selector_text(o),
    ]


def _row_replicaset(o: Obj, now: float) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    cs = _containers(o)
    return [
        spec.get("replicas", 1),
        status.get("replicas") or 0,
        status.get("readyReplicas") or 0,
        _age(o, now),
        ",".join(str(c.get("name")) for c in cs),
        ",".join(str(c.get("image")) for c in cs),
        _selector_text(o),
    ]


def _row_service(o: Obj, now: float) -> list[Any]:
    spec = o.get("spec") or {}
    ports = ",".join(
        f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
        for p in spec.get("ports") or []
    )
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    external = spec.get("externalName") or ",".join(spec.get("externalIPs") or []) or "<none>"
    return [
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or "<none>",
        external,
        ports or "<none>",
        _age(o, now),
        selector or "<none>",
    ]


def _row_configmap(o: Obj, now: float) -> list[Any]:
    return [len(o.get("data") or {}) + len(o.get("binaryData") or {}), _age(o, now)]


def _row_secret(o: Obj, now: float) -> list[Any]:
    return [o.get("type", "Opaque"), len(o.get("data") or {}), _age(o, now)]


def _row_namespace(o: Obj, now: float) -> list[Any]:
    return [(o.get("status") or {}).get("phase", "Active"), _age(o, now)]


def _row_lease(o: Obj, now: float) -> list[Any]:
    return [(o.get("spec") or {}).get("holderIdentity") or "", _age(o, now)]


def _row_created_at(o: Obj, now: float) -> list[Any]:
    return [(o.get("metadata") or {}).get("creationTimestamp", "")]


def _row_service_account(o: Obj, now: float) -> list[Any]:
    return [len(o.get("secrets") or []), _age(o, now)]


def _row_binding(o: Obj, now: float) -> list[Any]:
    ref = o.get("roleRef") or {}
    by_kind: dict[str, list[str]] = {"User": [], "Group": [], "ServiceAccount": []}
    for s in o.get("subjects") or []:
        name = (
            f"{s['namespace']}/{s.get('name')}"
            if s.get("kind") == "ServiceAccount" and s.get("namespace")
            else s.get("name")
        )
        by_kind.get(str(s.get("kind")), []).append(str(name))
    return [
        f"{ref.get('kind')}/{ref.get('name')}",
        _age(o, now),
        *(", ".join(names) for names in by_kind.values()),
    ]


def _prepare_pod(new: Obj, old: Obj | None) -> list[Cause]:
    status = new.setdefault("status", {})
    if old is None:
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", _qos(new))
        return []
    mutable = ("image",)
    strip = [{k: v for k, v in c.items() if k not in mutable} for c in (new.get("spec") or {}).get("containers", [])]
    strip_old = [
        {k: v for k, v in c.items() if k not in mutable} for c in (old.get("spec") or {}).get("containers", [])
    ]
    rest = {
        k: v
        for k, v in (new.get("spec") or {}).items()
        if k not in ("containers", "activeDeadlineSeconds", "tolerations")
    }
    rest_old = {
        k: v
        for k, v in (old.get("spec") or {}).items()
        if k not in ("containers", "activeDeadlineSeconds", "tolerations")
    }
    if strip != strip_old or rest != rest_old:
        return [
            (
                "spec",
                "FieldValueForbidden",
                "Forbidden: pod updates may not change fields other than "
                "`spec.containers[*].image`, `spec.activeDeadlineSeconds` or `spec.tolerations`",
            )
        ]
    return []


def _qos(pod: Obj) -> str:
    resources = [c.get("resources") or {} for c in (pod.get("spec") or {}).get("containers") or []]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(r.get("limits") and (r.get("requests") or r["limits"]) == r["limits"] for r in resources)
    return "Guaranteed" if guaranteed else "Burstable"


def _prepare_service(new: Obj, old: Obj | None) -> list[Cause]:
    spec = new.setdefault("spec", {})
    for port in spec.get("ports") or []:
        if isinstance(port, dict) and "port" in port and port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port["port"]  # unset, or the zero value a protobuf body carries
    if spec.get("type") == "ExternalName":
        return []
    old_spec = (old or {}).get("spec") or {}
    if old is not None and not spec.get("clusterIP") and old_spec.get("clusterIP"):
        spec["clusterIP"] = old_spec["clusterIP"]
    if old is not None and spec.get("clusterIP") != old_spec.get("clusterIP"):
        return [("spec.clusterIPs[0]", "FieldValueInvalid", "Invalid value: field is immutable")]
    if not spec.get("clusterIP"):
        meta = new.get("metadata") or {}
        h = zlib.crc32(f"{meta.get('namespace')}/{meta.get('name')}".encode())
        spec["clusterIP"] = f"10.96.{(h >> 8) % 254 + 1}.{h % 254 + 1}"
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    if spec["clusterIP"] != "None":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    return []


def _prepare_workload(new: Obj, old: Obj | None) -> list[Cause]:
    spec = new.get("spec") or {}
    try:
        selector = selector_from_object(spec.get("selector"))
    except SelectorError as e:
        return [("spec.selector", "FieldValueInvalid", f"Invalid value: {e}")]
    causes: list[Cause] = []
    if selector.empty:
        causes.append(("spec.selector", "FieldValueInvalid", "Invalid value: empty selector is invalid for deployment"))
    template = spec.get("template")
    if template is not None:
        labels = (template.get("metadata") or {}).get("labels") or {}
        if not selector.matches(labels):
            causes.append(
                (
                    "spec.template.metadata.labels",
                    "FieldValueInvalid",
                    f"Invalid value: {labels!r}: `selector` does not match template `labels`",
                )
            )
    if old is not None and spec.get("selector") != (old.get("spec") or {}).get("selector"):
        causes.append(("spec.selector", "FieldValueInvalid", "Invalid value: field is immutable"))
    return causes


def _prepare_namespace(new: Obj, old: Obj | None) -> list[Cause]:
    name = (new.get("metadata") or {}).get("name", "")
    new.setdefault("metadata", {}).setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    new.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    new.setdefault("status", {}).setdefault("phase", "Active")
    return []


def _cols(*spec: tuple[str, str, int]) -> tuple[Column, ...]:
    return tuple(_AGE if name == "Age" else Column(name, typ, priority=prio) for name, typ, prio in spec)


def _rbac_types() -> list[ResourceType]:
    """Role, ClusterRole, RoleBinding, ClusterRoleBinding: no spec, no generation, path-segment names."""
    created = (Column("Created At", "date"),)
    binding_cols = _cols(
        ("Role", "string", 0), ("Age", "", 0), ("Users", "string", 1), ("Groups", "string", 1),
        ("ServiceAccounts", "string", 1),
    )  # fmt: skip
    kinds = (
        ("Role", True, created, _row_created_at, prepare_role),
        ("ClusterRole", False, created, _row_created_at, prepare_cluster_role),
        ("RoleBinding", True, binding_cols, _row_binding, prepare_role_binding),
        ("ClusterRoleBinding", False, binding_cols, _row_binding, prepare_cluster_role_binding),
    )
    return [
        ResourceType(
            RBAC_GROUP,
            ("v1",),
            kind,
            f"{kind.lower()}s",
            kind.lower(),
            namespaced,
            {"v1": SCHEMAS[kind]},
            columns=columns,
            row=row,
            tracks_generation=False,
            prepare=prepare,
            openapi_name=f"io.k8s.api.rbac.v1.{kind}",
            path_segment_names=True,
        )
        for kind, namespaced, columns, row, prepare in kinds
    ]


def builtin_types() -> list[ResourceType]:
    """Fresh descriptions of every built-in resource, in discovery order."""
    workload_cols = _cols(("Containers", "string", 1), ("Images", "string", 1), ("Selector", "string", 1))
    return [
        ResourceType(
            "",
            ("v1",),
            "Namespace",
            "namespaces",
            "namespace",
            False,
            {"v1": SCHEMAS["Namespace"]},
            short_names=("ns",),
            status_subresource=True,
            columns=_cols(("Status", "string", 0), ("Age", "", 0)),
            row=_row_namespace,
            tracks_generation=False,
            prepare=_prepare_namespace,
            openapi_name="io.k8s.api.core.v1.Namespace",
        ),
        ResourceType(
            "",
            ("v1",),
            "Pod",
            "pods",
            "pod",
            True,
            {"v1": SCHEMAS["Pod"]},
            short_names=("po",),
            categories=("all",),
            status_subresource=True,
            columns=_cols(
                ("Ready", "string", 0),
                ("Status", "string", 0),
                ("Restarts", "string", 0),
                ("Age", "", 0),
                ("IP", "string", 1),
                ("Node", "string", 1),
                ("Nominated Node", "string", 1),
                ("Readiness Gates", "string", 1),
            ),
            row=_row_pod,
            prepare=_prepare_pod,
            openapi_name="io.k8s.api.core.v1.Pod",
        ),
        ResourceType(
            "",
            ("v1",),
            "ConfigMap",
            "configmaps",
            "configmap",
            True,
            {"v1": SCHEMAS["ConfigMap"]},
            short_names=("cm",),
            columns=_cols(("Data", "string", 0), ("Age", "", 0)),
            row=_row_configmap,
            tracks_generation=False,
            openapi_name="io.k8s.api.core.v1.ConfigMap",
        ),
        ResourceType(
            "",
            ("v1",),
            "Service",
            "services",
            "service",
            True,
            {"v1": SCHEMAS["Service"]},
            short_names=("svc",),
            categories=("all",),
            status_subresource=True,
            columns=_cols(
                ("Type", "string", 0),
                ("Cluster-IP", "string", 0),
                ("External-IP", "string", 0),
                ("Port(s)", "string", 0),
                ("Age", "", 0),
                ("Selector", "string", 1),
            ),
            row=_row_service,
            tracks_generation=False,
            prepare=_prepare_service,
            openapi_name="io.k8s.api.core.v1.Service",
        ),
        ResourceType(
            "",
            ("v1",),
            "ServiceAccount",
            "serviceaccounts",
            "serviceaccount",
            True,
            {"v1": SCHEMAS["ServiceAccount"]},
            short_names=("sa",),
            columns=_cols(("Secrets", "string", 0), ("Age", "", 0)),
            row=_row_service_account,
            tracks_generation=False,
            openapi_name="io.k8s.api.core.v1.ServiceAccount",
            token_request=True,
        ),
        ResourceType(
            "",
            ("v1",),
            "Secret",
            "secrets",
            "secret",
            True,
            {"v1": SCHEMAS["Secret"]},
            columns=_cols(("Type", "string", 0), ("Data", "string", 0), ("Age", "", 0)),
            row=_row_secret,
            tracks_generation=False,
            prepare=prepare_secret,
            openapi_name="io.k8s.api.core.v1.Secret",
        ),
        ResourceType(
            "apps",
            ("v1",),
            "Deployment",
            "deployments",
            "deployment",
            True,
            {"v1": SCHEMAS["Deployment"]},
            short_names=("deploy",),
            categories=("all",),
            status_subresource=True,
            scale=ScaleSpec(selector_from_spec=True),
            columns=_cols(
                ("Ready", "string", 0), ("Up-to-date", "integer", 0), ("Available", "integer", 0), ("Age", "", 0)
            )
            + workload_cols,
            row=_row_deployment,
            prepare=_prepare_workload,
            openapi_name="io.k8s.api.apps.v1.Deployment",
        ),
        ResourceType(
            "apps",
            ("v1",),
            "ReplicaSet",
            "replicasets",
            "replicaset",
            True,
            {"v1": SCHEMAS["ReplicaSet"]},
            short_names=("rs",),
            categories=("all",),
            status_subresource=True,
            scale=ScaleSpec(selector_from_spec=True),
            columns=_cols(("Desired", "integer", 0), ("Current", "integer", 0), ("Ready", "integer", 0), ("Age", "", 0))
            + workload_cols,
            row=_row_replicaset,
            prepare=_prepare_workload,
            openapi_name="io.k8s.api.apps.v1.ReplicaSet",
        ),
        ResourceType(
            "coordination.k8s.io",
            ("v1",),
            "Lease",
            "leases",
            "lease",
            True,
            {"v1": SCHEMAS["Lease"]},
            columns=_cols(("Holder", "string", 0), ("Age", "", 0)),
            row=_row_lease,
            tracks_generation=False,
            openapi_name="io.k8s.api.coordination.v1.Lease",
        ),
        *_rbac_types(),
        *review_types(),
        *autoscaling_types(),
        ResourceType(
            "apiextensions.k8s.io",
            ("v1",),
            "CustomResourceDefinition",
            "customresourcedefinitions",
            "customresourcedefinition",
            False,
            {"v1": SCHEMAS["CustomResourceDefinition"]},
            short_names=("crd", "crds"),
            categories=("api-extensions",),
            status_subresource=True,
            columns=(Column("Created At", "date"),),
            row=_row_created_at,
            prepare=prepare_crd,
            openapi_name="io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
        ),
    ]
