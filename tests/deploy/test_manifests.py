"""manifests/: every file parses and is listed, CRD schemas are structural and accept the samples,
RBAC is least-privilege, names agree across objects, and kustomize (kubectl's) renders every folder."""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from epp.config.picker_config import decode_config

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
POOL = "vllm-llama3-8b-instruct"
PICKER = "vllm-llama3-8b-instruct-epp"
AUTH = f"{PICKER}-metrics-auth"
READER = "epp-metrics-reader"
NAMESPACE = "default"
KUSTOMIZATION = "kustomization.yaml"
# manifests/autoscaler/ is the autoscaler's: deployed on its own, cluster-wide by design, in its
# own namespace. Only the generic checks (parses, named objects) apply to it here.
OTHER_OWNERS = ("autoscaler",)

Obj = dict[str, Any]


def _yaml_files() -> list[Path]:
    return sorted(MANIFESTS.rglob("*.yaml"))


def _docs(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _ours(path: Path) -> bool:
    return path.relative_to(MANIFESTS).parts[0] not in OTHER_OWNERS


def _objects(*, under: str = "") -> Iterator[tuple[Path, Obj]]:
    """Objects in the picker's manifests (not OTHER_OWNERS), optionally under one folder."""
    for path in _yaml_files():
        if path.name == KUSTOMIZATION or not _ours(path) or not str(path.relative_to(MANIFESTS)).startswith(under):
            continue
        for doc in _docs(path):
            yield path, doc


def _patch_files() -> set[Path]:
    patches = set()
    for kust in filter(_ours, MANIFESTS.rglob(KUSTOMIZATION)):
        for patch in yaml.safe_load(kust.read_text()).get("patches", []):
            patches.add((kust.parent / patch["path"]).resolve())
    return patches


def _resources() -> list[Obj]:
    """Every object a cluster would receive (patch files excluded)."""
    patches = _patch_files()
    return [doc for path, doc in _objects() if path.resolve() not in patches]


def _find(kind: str, name: str, *, api_version: str | None = None, under: str = "") -> Obj:
    patches = _patch_files()
    matches = [
        o
        for path, o in _objects(under=under)
        if path.resolve() not in patches
        and o["kind"] == kind
        and o["metadata"]["name"] == name
        and api_version in (None, o["apiVersion"])
    ]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def test_every_file_parses_and_every_object_is_named() -> None:
    files = _yaml_files()
    assert len(files) > 20
    for path in files:
        docs = _docs(path)
        assert docs, f"{path} is empty"
        for doc in docs:
            assert isinstance(doc, dict), path
            assert doc.get("apiVersion") and doc.get("kind"), f"{path}: missing apiVersion/kind"
            if path.name != KUSTOMIZATION:
                assert doc.get("metadata", {}).get("name"), f"{path}: {doc['kind']} without metadata.name"


def test_every_kustomization_lists_every_file_in_its_folder() -> None:
    kustomizations = sorted(k for k in MANIFESTS.rglob(KUSTOMIZATION) if _ours(k))
    assert {k.parent.relative_to(MANIFESTS).as_posix() for k in kustomizations} == {
        ".",
        "crds",
        "epp",
        "samples",
        "overlays/leader-election",
        "overlays/pd",
        "overlays/active-active-valkey",
        "gateways/envoy-gateway",
        "gateways/istio",
        "observability",
    }
    for kust in kustomizations:
        spec = yaml.safe_load(kust.read_text())
        assert spec["kind"] == "Kustomization"
        folder = kust.parent
        listed = [*spec.get("resources", []), *(p["path"] for p in spec.get("patches", []))]
        for entry in listed:
            target = (folder / entry).resolve()
            assert target.exists(), f"{kust} lists missing {entry}"
            if target.is_dir():
                assert (target / KUSTOMIZATION).exists(), f"{kust}: {entry} has no kustomization"
        local_files = {p.name for p in folder.glob("*.yaml")} - {KUSTOMIZATION}
        assert local_files == {e for e in listed if "/" not in e and e.endswith(".yaml")}, kust


@pytest.mark.parametrize(
    "folder",
    [
        ".",
        "crds",
        "epp",
        "samples",
        "overlays/leader-election",
        "overlays/pd",
        "overlays/active-active-valkey",
        "gateways/envoy-gateway",
        "gateways/istio",
        "observability",
    ],
)
async def test_kubectl_kustomize_renders(folder: str, tmp_path: Path) -> None:
    kubectl = Path(sys.executable).parent / "kubectl"
    exe = str(kubectl) if kubectl.exists() else shutil.which("kubectl")
    assert exe, "kubectl not installed"
    proc = await asyncio.create_subprocess_exec(
        exe,
        "kustomize",
        str(MANIFESTS / folder),
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    rendered = [d for d in yaml.safe_load_all(out) if d]
    assert rendered and all(d["metadata"]["name"] for d in rendered)
    if folder == "overlays/leader-election":
        (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
        assert deployment["spec"]["replicas"] == 3
        assert "--ha-enable-leader-election" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    if folder == "overlays/active-active-valkey":
        picker, valkey = sorted((d for d in rendered if d["kind"] == "Deployment"), key=lambda d: d["metadata"]["name"])
        args = picker["spec"]["template"]["spec"]["containers"][0]["args"]
        assert picker["spec"]["replicas"] == 3 and "--ha-enable-leader-election" not in args
        (address,) = [a.split("=", 1)[1] for a in args if a.startswith("--state-sync-address=")]
        (service,) = [
            d for d in rendered if d["kind"] == "Service" and d["metadata"]["name"] == valkey["metadata"]["name"]
        ]
        assert address == f"redis://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"


# --- CRDs -------------------------------------------------------------------------------------


def _crds() -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for _, o in _objects(under="crds")}


def _walk_schema(node: Obj, path: str) -> Iterator[tuple[str, Obj]]:
    """Every schema node with its path from the root ("" is the root, then ".spec", ".spec.x[]")."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk_schema(child, f"{path}.{name}")
    if "items" in node:
        yield from _walk_schema(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk_schema(node["additionalProperties"], f"{path}{{}}")


def test_the_seven_crds_with_their_versions() -> None:
    crds = _crds()
    versions = {
        name: [(v["name"], v["served"], v["storage"]) for v in c["spec"]["versions"]] for name, c in crds.items()
    }
    assert versions == {
        "inferencepools.inference.networking.k8s.io": [("v1", True, True)],
        "inferencepools.inference.networking.x-k8s.io": [("v1alpha2", True, True)],
        "inferencemodels.inference.networking.x-k8s.io": [("v1alpha2", True, True)],
        "inferenceobjectives.inference.networking.x-k8s.io": [("v1alpha2", True, True)],
        "inferencemodelrewrites.inference.networking.x-k8s.io": [("v1alpha2", True, True)],
        "inferenceobjectives.llm-d.ai": [("v1alpha2", True, True)],
        "inferencemodelrewrites.llm-d.ai": [("v1alpha2", True, True)],
    }
    for name, crd in crds.items():
        spec = crd["spec"]
        assert name == f"{spec['names']['plural']}.{spec['group']}"
        assert spec["scope"] == "Namespaced"
        for version in spec["versions"]:
            assert version["subresources"] == {"status": {}}, name


def test_llm_d_group_crds_are_the_legacy_ones_in_another_group() -> None:
    crds = _crds()
    for plural in ("inferenceobjectives", "inferencemodelrewrites"):
        new, legacy = crds[f"{plural}.llm-d.ai"]["spec"], crds[f"{plural}.inference.networking.x-k8s.io"]["spec"]
        assert (new["group"], legacy["group"]) == ("llm-d.ai", "inference.networking.x-k8s.io")
        assert {k: v for k, v in new.items() if k != "group"} == {k: v for k, v in legacy.items() if k != "group"}


def test_crd_schemas_are_structural() -> None:
    for name, crd in _crds().items():
        for version in crd["spec"]["versions"]:
            for path, node in _walk_schema(version["schema"]["openAPIV3Schema"], ""):
                assert "type" in node, f"{name}{path} has no type"
                if node["type"] == "object" and path not in ("", ".metadata"):
                    assert "properties" in node or "additionalProperties" in node, f"{name}{path}: object of nothing"


def _schema_for(obj: Obj) -> Obj:
    group, version = obj["apiVersion"].split("/")
    for crd in _crds().values():
        if crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == obj["kind"]:
            (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
            schema: Obj = v["schema"]["openAPIV3Schema"]
            return schema
    raise AssertionError(f"no CRD for {obj['apiVersion']} {obj['kind']}")


_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "boolean": bool,
    "number": (int, float),
}


def _violations(value: Any, schema: Obj, path: str) -> Iterator[str]:
    """The subset of OpenAPI validation our schemas use; unknown fields count (the server prunes them)."""
    well_typed = isinstance(value, _TYPES[schema["type"]])
    if not well_typed or (schema["type"] == "integer" and isinstance(value, bool)):
        yield f"{path}: {value!r} is not {schema['type']}"
        return
    if "enum" in schema and value not in schema["enum"]:
        yield f"{path}: {value!r} not in {schema['enum']}"
    if "minimum" in schema and value < schema["minimum"] or "maximum" in schema and value > schema["maximum"]:
        yield f"{path}: {value} out of range"
    if isinstance(value, str):
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            yield f"{path}: length {len(value)} out of range"
        if "pattern" in schema and not re.search(schema["pattern"], value):
            yield f"{path}: {value!r} does not match {schema['pattern']}"
    if isinstance(value, list):
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value)):
            yield f"{path}: {len(value)} items"
        for i, item in enumerate(value):
            yield from _violations(item, schema["items"], f"{path}[{i}]")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                yield f"{path}.{key}: required"
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if props is not None and key in props:
                yield from _violations(item, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from _violations(item, extra, f"{path}.{key}")
            elif props is not None and key != "metadata":
                yield f"{path}.{key}: unknown field (the API server would prune it)"


def test_sample_objects_satisfy_their_crd_schemas() -> None:
    custom = [o for o in _resources() if o["apiVersion"].split("/")[0].startswith("inference.networking.")]
    assert {o["kind"] for o in custom} == {
        "InferencePool",
        "InferenceObjective",
        "InferenceModelRewrite",
        "InferenceModel",
    }
    for obj in custom:
        problems = list(_violations(obj, _schema_for(obj), obj["kind"]))
        assert problems == [], problems


def test_the_validator_catches_what_it_claims_to() -> None:
    objective = _find("InferenceObjective", "critical")
    schema = _schema_for(objective)
    bad = {**objective, "spec": {"priority": "high", "poolRef": {"kind": "9"}, "targetModels": []}}
    problems = list(_violations(bad, schema, "x"))
    assert "x.spec.priority: 'high' is not integer" in problems
    assert "x.spec.poolRef.name: required" in problems
    assert "x.spec.targetModels: unknown field (the API server would prune it)" in problems
    pool = _find("InferencePool", POOL, api_version="inference.networking.k8s.io/v1")
    bad_pool = {**pool, "spec": {**pool["spec"], "targetPorts": [{"number": 0}] * 9, "appProtocol": "grpc"}}
    problems = list(_violations(bad_pool, _schema_for(pool), "p"))
    assert "p.spec.targetPorts: 9 items" in problems
    assert "p.spec.targetPorts[0].number: 0 out of range" in problems
    assert "p.spec.appProtocol: 'grpc' not in ['http', 'kubernetes.io/h2c']" in problems


# --- the picker ---------------------------------------------------------------------------------


def test_rbac_is_least_privilege_and_without_wildcards() -> None:
    roles = [(p, o) for p, o in _objects() if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")]
    assert roles
    cluster_wide = {(o["kind"], o["metadata"]["name"]) for _, o in roles if o["kind"].startswith("Cluster")}
    assert cluster_wide == {
        (kind, name) for kind in ("ClusterRole", "ClusterRoleBinding") for name in (AUTH, READER)
    }, "only the metrics auth reviews and the /metrics reader are cluster-wide"
    for path, obj in roles:
        if obj["kind"] in ("Role", "RoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE
        for rule in obj.get("rules", []):
            for field in ("verbs", "resources", "apiGroups", "nonResourceURLs"):
                assert "*" not in rule.get(field, []), f"{path}: wildcard {field}"
            if obj["kind"] == "Role" and "overlays/leader-election" not in str(path):
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, f"{path}: writes {rule}"
                assert "leases" not in rule["resources"]
    lease_rules = [r for p, o in roles if "leader-election" in str(p) for r in o.get("rules", [])]
    assert any("leases" in r["resources"] for r in lease_rules)

    role = _find("Role", PICKER)
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == {
        ("", "pods"),
        ("inference.networking.k8s.io", "inferencepools"),
        ("inference.networking.x-k8s.io", "inferencepools"),
        ("inference.networking.x-k8s.io", "inferencemodels"),
        ("inference.networking.x-k8s.io", "inferenceobjectives"),
        ("inference.networking.x-k8s.io", "inferencemodelrewrites"),
        ("llm-d.ai", "inferenceobjectives"),
        ("llm-d.ai", "inferencemodelrewrites"),
    }
    binding = _find("RoleBinding", PICKER)
    assert binding["roleRef"]["name"] == PICKER
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": PICKER, "namespace": NAMESPACE}]


def test_the_picker_may_review_tokens_and_prometheus_may_read_metrics() -> None:
    assert _find("ClusterRole", AUTH)["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    ]
    assert _find("ClusterRoleBinding", AUTH)["subjects"] == [
        {"kind": "ServiceAccount", "name": PICKER, "namespace": NAMESPACE}
    ]
    assert _find("ClusterRole", READER)["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert _find("ClusterRoleBinding", READER)["subjects"] == [
        {"kind": "ServiceAccount", "name": READER, "namespace": NAMESPACE}
    ]
    _find("ServiceAccount", READER)
    secret = _find("Secret", f"{READER}-token")
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": READER}
    args = _find("Deployment", PICKER)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--metrics-endpoint-auth") for a in args)  # upstream's default: on


def test_picker_deployment_service_and_config_agree() -> None:
    deployment = _find("Deployment", PICKER)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert f"--pool-name={POOL}" in args
    assert "--config-file=/config/epp-config.yaml" in args
    assert pod["serviceAccountName"] == PICKER
    assert container["livenessProbe"]["grpc"] == {"port": 9003, "service": "liveness"}
    assert container["readinessProbe"]["grpc"] == {"port": 9003, "service": "readiness"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "grpc": 9002,
        "grpc-health": 9003,
        "metrics": 9090,
        "epp-api": 9004,
    }
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True

    service = _find("Service", PICKER)
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "grpc": 9002,
        "grpc-health": 9003,
        "metrics": 9090,
        "epp-api": 9004,
    }

    config_map = _find("ConfigMap", PICKER)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] == PICKER
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert mount["mountPath"] == "/config"
    config = decode_config(config_map["data"]["epp-config.yaml"])
    assert [p.plugin_ref for p in config.scheduling_profiles[0].plugins][:3] == [
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "prefix-cache-scorer",
    ]


def test_sample_pool_points_at_the_picker_and_selects_the_model_servers() -> None:
    pool = _find("InferencePool", POOL, api_version="inference.networking.k8s.io/v1")
    assert pool["spec"]["endpointPickerRef"]["name"] == PICKER
    assert pool["spec"]["endpointPickerRef"]["port"]["number"] == 9002
    vllm = _find("Deployment", POOL)
    labels = vllm["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = vllm["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("vllm/vllm-openai")
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert [p["containerPort"] for p in container["ports"]] == [t["number"] for t in pool["spec"]["targetPorts"]]
    priorities = {
        o["metadata"]["name"]: o["spec"]["priority"] for o in _resources() if o["kind"] == "InferenceObjective"
    }
    assert priorities == {"critical": 10, "sheddable": -1}
    for obj in _resources():
        if obj["kind"] in ("InferenceObjective", "InferenceModelRewrite", "InferenceModel"):
            assert obj["spec"]["poolRef"]["name"] == POOL


def test_namespaced_objects_are_in_the_sample_namespace() -> None:
    cluster_scoped = {"CustomResourceDefinition", "GatewayClass", "ClusterRole", "ClusterRoleBinding"}
    for path, obj in _objects():
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace") == NAMESPACE, f"{path}: {obj['kind']} {obj['metadata']['name']}"


# --- gateways -------------------------------------------------------------------------------------


def test_envoy_gateway_uses_the_gie_processing_mode() -> None:
    route = _find("HTTPRoute", "llm-route", under="gateways/envoy-gateway")
    assert route["spec"]["rules"][0]["backendRefs"][0]["kind"] == "InferencePool"
    policy = _find("EnvoyExtensionPolicy", PICKER)
    (ext_proc,) = policy["spec"]["extProc"]
    assert ext_proc["processingMode"] == {
        "request": {"body": "FullDuplexStreamed"},
        "response": {"body": "FullDuplexStreamed"},
    }
    assert ext_proc["failOpen"] is False
    assert ext_proc["metadata"]["writableNamespaces"] == ["envoy.lb"]
    backend = _find("Backend", PICKER)
    assert backend["spec"]["endpoints"][0]["fqdn"]["port"] == 9002
    assert backend["spec"]["tls"]["insecureSkipVerify"] is True


def test_both_gateways_end_ext_proc_streams_gracefully() -> None:
    """The runtime guard our own Envoys set (epp_sim.stack.envoy_config), in the form each gateway takes."""
    from epp_sim.stack.envoy_config import GRACEFUL_CLOSE_GUARD

    eg = _find("Gateway", "inference-gateway", under="gateways/envoy-gateway")
    ref = eg["spec"]["infrastructure"]["parametersRef"]
    proxy = _find("EnvoyProxy", ref["name"])
    assert (ref["group"], ref["kind"]) == ("gateway.envoyproxy.io", "EnvoyProxy")
    assert proxy["spec"]["bootstrap"]["type"] == "Merge"
    layers = yaml.safe_load(proxy["spec"]["bootstrap"]["value"])["layered_runtime"]["layers"]
    assert [layer["static_layer"] for layer in layers] == [{GRACEFUL_CLOSE_GUARD: True}]

    istio = _find("Gateway", "inference-gateway", under="gateways/istio")
    proxy_config = yaml.safe_load(istio["spec"]["infrastructure"]["annotations"]["proxy.istio.io/config"])
    assert proxy_config == {"runtimeValues": {GRACEFUL_CLOSE_GUARD: "true"}}


def test_istio_envoyfilter_matches_our_bootstrap() -> None:
    from epp_sim.stack.envoy_config import ExtProcTarget, envoy_bootstrap

    ours = envoy_bootstrap(listen_port=0, ext_proc=ExtProcTarget("127.0.0.1", 9002), admin_port=0)
    hcm = ours["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    our_filter = hcm["http_filters"][0]["typed_config"]
    our_cluster = next(c for c in ours["static_resources"]["clusters"] if c["name"] == "original_destination")

    envoy_filter = _find("EnvoyFilter", PICKER)
    patches = {p["applyTo"]: p["patch"]["value"] for p in envoy_filter["spec"]["configPatches"]}
    theirs = patches["HTTP_FILTER"]["typed_config"]
    for key in ("processing_mode", "message_timeout", "failure_mode_allow"):
        assert theirs[key] == our_filter[key], key
    # The picker's routing metadata is accepted the same way. Reporting the served endpoint back
    # (our bootstrap's forwarding_namespaces) is the gateway's part; this EnvoyFilter leaves it out.
    receiving = our_filter["metadata_options"]["receiving_namespaces"]
    assert theirs["metadata_options"] == {"receiving_namespaces": receiving}
    assert patches["CLUSTER"]["original_dst_lb_config"] == our_cluster["original_dst_lb_config"]
    assert patches["HTTP_ROUTE"]["route"]["cluster"] == our_cluster["name"]
    assert PICKER in theirs["grpc_service"]["envoy_grpc"]["cluster_name"]

    rule = _find("DestinationRule", PICKER)
    assert rule["spec"]["host"].startswith(f"{PICKER}.{NAMESPACE}.svc")
    assert rule["spec"]["trafficPolicy"]["tls"] == {"mode": "SIMPLE", "insecureSkipVerify": True}
