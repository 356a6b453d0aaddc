"""Scale targets: Deployment and LeaderWorkerSet views, accelerator discovery, roles, GPUs, engines, pod mapping."""

from __future__ import annotations

from typing import Any

import pytest

from epp.autoscale.cluster import parse_pod
from epp.autoscale.engine_args import SGLANG, VLLM, EngineParams, engine_of, engine_params
from epp.autoscale.scaletargets import DEPLOYMENT, LWS, accelerator_of, map_pods, parse_scale_target


def template(*, labels: dict[str, str] | None = None, gpus: str = "", **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "vllm", "image": "vllm/vllm-openai", "args": spec.pop("args", [])}
    if gpus:
        container["resources"] = {"requests": {"nvidia.com/gpu": gpus}}
    return {"metadata": {"labels": labels or {}}, "spec": {"containers": [container], **spec}}


def _in(key: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}


REQUIRED = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    _in("amd.com/gpu.product-name", "MI300X", "MI250")
]}}}  # fmt: skip
PREFERRED = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 1, "preference": _in("nvidia.com/gpu.product", "A100")}
]}}  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "labels", "expected"),
    [
        ({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}, {}, "NVIDIA-H100-80GB-HBM3"),
        ({"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}}, {}, "nvidia-l4"),
        ({"affinity": REQUIRED}, {}, "MI300X"),
        ({"affinity": PREFERRED}, {}, "A100"),
        ({"affinity": {"nodeAffinity": {}}}, {"inference.optimization/acceleratorName": "L40S"}, "L40S"),
        ({"nodeSelector": {"kubernetes.io/arch": "amd64"}}, {}, "unknown"),
    ],
)
def test_accelerator_discovery_order_and_unknown_fallback(
    spec: dict[str, Any], labels: dict[str, str], expected: str
) -> None:
    assert accelerator_of(template(**spec), labels) == expected


def test_deployment_view() -> None:
    dep = {
        "metadata": {"name": "llama", "namespace": "ns", "uid": "u1"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "llama"}},
            "template": template(labels={"llm-d.ai/role": "decode"}, gpus="2", args=["--max-num-seqs", "64"]),
        },
        "status": {"replicas": 3, "readyReplicas": 2},
    }
    v = parse_scale_target(DEPLOYMENT, dep)
    assert (v.spec_replicas, v.status_replicas, v.ready_replicas, v.gpus_per_replica, v.role, v.group_size) == (
        3, 3, 2, 2, "decode", 1,
    )  # fmt: skip
    assert v.params.max_num_seqs == 64 and v.engine == VLLM
    no_replicas = {**dep, "spec": {**dep["spec"], "replicas": None}}
    assert parse_scale_target(DEPLOYMENT, no_replicas).spec_replicas == 1  # Kubernetes defaults a nil to 1
    unknown_role = template(labels={"llm-d.ai/role": "router"})
    assert parse_scale_target(DEPLOYMENT, {**dep, "spec": {**dep["spec"], "template": unknown_role}}).role == "both"


def test_a_leaderworkerset_replica_is_a_group() -> None:
    lws = {
        "metadata": {"name": "wide-ep", "namespace": "ns"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 4,
                "leaderTemplate": template(labels={"llm-d.ai/role": "prefill"}, gpus="8"),
                "workerTemplate": template(gpus="8"),
            },
        },
        "status": {"replicas": 2, "readyReplicas": 1},
    }
    v = parse_scale_target(LWS, lws)
    assert (v.group_size, v.gpus_per_replica, v.role, v.ready_replicas) == (4, 32, "prefill", 1)  # 8 + 3 × 8
    lws["spec"]["leaderWorkerTemplate"].pop("leaderTemplate")
    assert parse_scale_target(LWS, lws).gpus_per_replica == 24  # workers only: (size − 1) × 8
    assert parse_scale_target(LWS, {"metadata": {"name": "x"}, "spec": {}}).gpus_per_replica == 1


def _pod(name: str, labels: dict[str, str], owner: tuple[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "uid": "", "controller": True}]
    return {"metadata": meta, "status": {"podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_pods_map_to_their_workload_and_only_lws_leaders_count() -> None:
    dep = parse_scale_target(
        DEPLOYMENT, {"metadata": {"name": "d", "uid": "ud"}, "spec": {"selector": {"matchLabels": {"app": "d"}}}}
    )
    lws = parse_scale_target(LWS, {"metadata": {"name": "g"}, "spec": {}})
    rs = {
        "metadata": {
            "name": "d-abc",
            "ownerReferences": [{"kind": "Deployment", "name": "d", "uid": "ud", "controller": True}],
        }
    }
    pods = [
        _pod("d-abc-1", {"app": "d"}, ("ReplicaSet", "d-abc")),
        _pod("bare", {"app": "d"}),
        _pod("g-0", {"leaderworkerset.sigs.k8s.io/name": "g", "leaderworkerset.sigs.k8s.io/worker-index": "0"}),
        _pod("g-0-1", {"leaderworkerset.sigs.k8s.io/name": "g", "leaderworkerset.sigs.k8s.io/worker-index": "1"}),
        _pod("other-0", {"leaderworkerset.sigs.k8s.io/name": "other", "leaderworkerset.sigs.k8s.io/worker-index": "0"}),
    ]
    mapped = map_pods([dep, lws], [rs], [parse_pod(p) for p in pods])
    assert {k: [p.name for p in v] for k, v in mapped.items()} == {
        (DEPLOYMENT, "d"): ["d-abc-1", "bare"],
        (LWS, "g"): ["g-0"],
    }


def test_engine_detection_and_arguments() -> None:
    sglang = {
        "spec": {
            "containers": [
                {"image": "lmsysorg/sglang:latest", "args": ["--max-running-requests", "32", "--page-size", "4"]}
            ]
        }
    }
    assert engine_of(sglang) == SGLANG
    assert engine_params(sglang) == EngineParams(engine=SGLANG, max_num_seqs=32, block_size=4)
    shell = {
        "spec": {
            "containers": [{"command": ["/bin/sh", "-c", "python3 -m sglang.launch_server --max-total-tokens 90000"]}]
        }
    }
    assert engine_of(shell) == SGLANG and engine_params(shell).kv_tokens == 90000
    vllm = {
        "spec": {
            "containers": [
                {
                    "args": ["--max-num-batched-tokens=4096", "--num-gpu-blocks-override", "100", "--block-size", "32"],
                    "env": [{"name": "VLLM_USE_V1", "value": "0"}],
                }
            ]
        }
    }
    params = engine_params(vllm)
    assert (params.kv_tokens, params.effective_batched_tokens, params.v1_engine) == (3200, 4096, False)
    assert EngineParams(v1_engine=False).effective_batched_tokens == 2048
    assert EngineParams().effective_batched_tokens == 8192
