"""Test doubles for the autoscaler's two I/O seams (for its pure logic; the loop itself is tested
against the fake API server in test_e2e): an in-memory Cluster and a pinned MetricsSource."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from epp.autoscale.inputs import ModelSignals, PodTarget
from epp.autoscale.types import ModelKey, ReplicaMetrics, VariantKey
from epp.kube.client import KubeUnavailableError


def annotated_hpa(
    ns: str, name: str, *, model: str = "llama", cost: str = "10", target: str = "", **spec: Any
) -> dict[str, Any]:
    """An HPA declaring a variant the WVA v0.9 way."""
    return {
        "metadata": {
            "namespace": ns,
            "name": name,
            "uid": f"uid-hpa-{name}",
            "annotations": {"llm-d.ai/managed": "true", "llm-d.ai/model-id": model, "llm-d.ai/variant-cost": cost},
        },
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": target or name},
            "minReplicas": 1,
            "maxReplicas": 10,
            **spec,
        },
    }


def va(
    ns: str,
    name: str,
    *,
    model: str = "llama",
    deployment: str | None = None,
    cost: str = "10",
    accelerator: str = "A100",
    **spec: Any,
) -> dict[str, Any]:
    labels = {"inference.optimization/acceleratorName": accelerator} if accelerator else {}
    return {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {"namespace": ns, "name": name, "labels": labels},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": deployment or name},
            "modelID": model,
            "variantCost": cost,
            **spec,
        },
    }


class FakeCluster:
    """Deployments with ready counts; pods (owned via a ReplicaSet) generated to match."""

    def __init__(self) -> None:
        self.vas: dict[VariantKey, dict[str, Any]] = {}
        self.hpas: list[dict[str, Any]] = []
        self.scaled_objects: list[dict[str, Any]] | None = None
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.deployments: dict[tuple[str, str], dict[str, Any]] = {}
        self.extra_pods: list[dict[str, Any]] = []
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.status_patches: list[tuple[VariantKey, dict[str, Any]]] = []
        self.scales: list[tuple[str, str, int]] = []  # (namespace, name, replicas)
        self.fail_status_for: set[VariantKey] = set()

    def add_va(self, obj: dict[str, Any]) -> None:
        m = obj["metadata"]
        self.vas[VariantKey(m["namespace"], m["name"])] = obj

    def set_deployment(
        self,
        ns: str,
        name: str,
        *,
        spec: int,
        status: int | None = None,
        ready: int | None = None,
        template: dict[str, Any] | None = None,
    ) -> None:
        status = spec if status is None else status
        ready = status if ready is None else ready
        self.deployments[(ns, name)] = {
            "metadata": {"namespace": ns, "name": name, "uid": f"uid-{ns}-{name}", "generation": 1},
            "spec": {"replicas": spec, "selector": {"matchLabels": {"app": name}}, "template": template or {}},
            "status": {"replicas": status, "readyReplicas": ready, "observedGeneration": 1},
        }

    def pod_names(self, ns: str, name: str) -> list[str]:
        dep = self.deployments[(ns, name)]
        return [f"{name}-rs-{i}" for i in range(dep["status"]["replicas"])]

    async def list_variant_autoscalings(self) -> list[Mapping[str, Any]] | None:
        """None when no VA was ever added: the CRD is not installed."""
        return [copy.deepcopy(v) for v in self.vas.values()] if self.vas else None

    async def list_hpas(self) -> list[Mapping[str, Any]]:
        return copy.deepcopy(self.hpas)

    async def list_scaled_objects(self) -> list[Mapping[str, Any]] | None:
        return copy.deepcopy(self.scaled_objects)

    async def list_leaderworkersets(self, namespace: str) -> list[Mapping[str, Any]]:
        return []

    async def list_deployments(self, namespace: str) -> list[Mapping[str, Any]]:
        return [copy.deepcopy(d) for (ns, _), d in self.deployments.items() if ns == namespace]

    async def list_replicasets(self, namespace: str) -> list[Mapping[str, Any]]:
        return [
            {
                "metadata": {
                    "namespace": ns,
                    "name": f"{name}-rs",
                    "ownerReferences": [
                        {"kind": "Deployment", "name": name, "uid": d["metadata"]["uid"], "controller": True}
                    ],
                }
            }
            for (ns, name), d in self.deployments.items()
            if ns == namespace
        ]

    async def list_pods(self, namespace: str) -> list[Mapping[str, Any]]:
        pods: list[Mapping[str, Any]] = []
        for (ns, name), d in self.deployments.items():
            if ns != namespace:
                continue
            ready = d["status"]["readyReplicas"]
            for i, pod in enumerate(self.pod_names(ns, name)):
                pods.append(
                    {
                        "metadata": {
                            "namespace": ns,
                            "name": pod,
                            "labels": {"app": name},
                            "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name}-rs", "controller": True}],
                        },
                        "spec": {"containers": [{"ports": [{"containerPort": 8000}]}]},
                        "status": {
                            "podIP": f"10.0.0.{i + 1}",
                            "conditions": [{"type": "Ready", "status": "True" if i < ready else "False"}],
                        },
                    }
                )
        pods.extend(p for p in self.extra_pods if p["metadata"]["namespace"] == namespace)
        return pods

    async def get_configmap(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.configmaps.get((namespace, name))

    async def patch_variant_status(self, key: VariantKey, status: Mapping[str, Any]) -> None:
        if key in self.fail_status_for:
            raise KubeUnavailableError(f"PATCH {key}/status: HTTP 503")
        self.status_patches.append((key, copy.deepcopy(dict(status))))
        obj = self.vas[key]
        obj.setdefault("status", {}).update(copy.deepcopy(dict(status)))

    async def scale(self, namespace: str, kind: str, name: str, replicas: int) -> None:
        self.scales.append((namespace, name, replicas))
        self.deployments[(namespace, name)]["spec"]["replicas"] = replicas

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        self.events.append((namespace, copy.deepcopy(dict(event))))

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        for ns, event in self.events:
            if ns == namespace and event["metadata"]["name"] == name:
                event.update(patch)


class PinnedSource:
    """Load pinned per (namespace, pod); records what the controller asked for."""

    def __init__(self) -> None:
        self.load: dict[tuple[str, str], tuple[float, float]] = {}
        self.asked: list[tuple[ModelKey, list[str]]] = []
        self.idle_answer: bool | None = None

    def pin(self, ns: str, pods: Sequence[str], kv: float, queue: float) -> None:
        for p in pods:
            self.load[(ns, p)] = (kv, queue)

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> list[ReplicaMetrics]:
        self.asked.append((key, sorted(p.name for p in pods)))
        return [
            ReplicaMetrics(p.name, *self.load[(p.namespace, p.name)])
            for p in pods
            if (p.namespace, p.name) in self.load
        ]

    async def idle(self, key: ModelKey, pods: Sequence[PodTarget], window: float) -> bool | None:
        return self.idle_answer

    async def model_signals(self, key: ModelKey) -> ModelSignals | None:
        return None
