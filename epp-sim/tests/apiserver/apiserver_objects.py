"""Object builders for the fake API server tests: a pod, a deployment, RBAC objects, the InferencePool CRD and pools."""

from __future__ import annotations

from typing import Any


def pod(name: str, *, labels: dict[str, str] | None = None, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    """A minimal valid Pod."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.11"}], **spec},
    }


def deployment(name: str, *, replicas: int = 1, app: str = "vllm") -> dict[str, Any]:
    """A minimal valid Deployment selecting ``app``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.11",
                            "ports": [{"containerPort": 8000, "name": "http"}],
                        }
                    ]
                },
            },
        },
    }


POOL_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "inferencepools.inference.networking.k8s.io"},
    "spec": {
        "group": "inference.networking.k8s.io",
        "names": {
            "kind": "InferencePool",
            "listKind": "InferencePoolList",
            "plural": "inferencepools",
            "singular": "inferencepool",
            "shortNames": ["infpool"],
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Port", "type": "integer", "jsonPath": ".spec.targetPorts[0].number"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "required": ["spec"],
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {
                                "type": "object",
                                "required": ["selector", "targetPorts", "endpointPickerRef"],
                                "properties": {
                                    "selector": {
                                        "type": "object",
                                        "properties": {
                                            "matchLabels": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                        },
                                    },
                                    "targetPorts": {
                                        "type": "array",
                                        "minItems": 1,
                                        "maxItems": 8,
                                        "x-kubernetes-list-type": "atomic",
                                        "items": {
                                            "type": "object",
                                            "required": ["number"],
                                            "properties": {
                                                "number": {"type": "integer", "minimum": 1, "maximum": 65535}
                                            },
                                        },
                                    },
                                    "endpointPickerRef": {
                                        "type": "object",
                                        "required": ["name"],
                                        "properties": {
                                            "name": {"type": "string"},
                                            "kind": {"type": "string", "default": "Service"},
                                            "port": {"type": "object", "properties": {"number": {"type": "integer"}}},
                                            "failureMode": {
                                                "type": "string",
                                                "default": "FailClose",
                                                "enum": ["FailOpen", "FailClose"],
                                            },
                                        },
                                    },
                                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                },
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            },
            {
                "name": "v1alpha2",
                "served": True,
                "storage": False,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            },
        ],
    },
}


def pool(name: str, *, port: int = 8000, **spec: Any) -> dict[str, Any]:
    """An InferencePool v1 (needs ``POOL_CRD``)."""
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "vllm"}},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
            **spec,
        },
    }


def role(name: str, *, cluster: bool = False, **rule: Any) -> dict[str, Any]:
    """A Role (or ClusterRole) with one rule: read pods unless ``rule`` says otherwise."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole" if cluster else "Role",
        "metadata": {"name": name},
        "rules": [rule or {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }


def binding(name: str, role_name: str, *, cluster: bool = False, role_kind: str | None = None) -> dict[str, Any]:
    """A RoleBinding (or ClusterRoleBinding) of ``role_name`` to the ``default/epp`` ServiceAccount."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding" if cluster else "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind or ("ClusterRole" if cluster else "Role"),
            "name": role_name,
        },
        "subjects": [{"kind": "ServiceAccount", "name": "epp", "namespace": "default"}],
    }
