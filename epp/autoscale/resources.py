"""kr8s behind the autoscaler's :class:`~epp.autoscale.cluster.Cluster` protocol.

Declares the ``VariantAutoscaling`` kind (``llmd.ai/v1alpha1``, short name ``va``) as a kr8s class,
reads lists through ``epp.kube.client`` (one error boundary, paginated with ``limit``/``continue``)
and writes through the ``status`` and ``scale`` subresources, so the autoscaler never touches a
Deployment's spec or a VA's spec. Every kr8s/httpx error leaves here as a ``KubeError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from kr8s.asyncio.objects import APIObject, Deployment

from epp.autoscale.cluster import Obj
from epp.autoscale.types import VariantKey
from epp.kube.client import Api, KubeApiError, request_json, translate_errors

__all__ = ["CONTROLLER_INSTANCE_LABEL", "GROUP_VERSION", "KubeCluster", "VariantAutoscaling"]

GROUP_VERSION = "llmd.ai/v1alpha1"
CONTROLLER_INSTANCE_LABEL = "wva.llmd.ai/controller-instance"
_PAGE = "500"


class VariantAutoscaling(APIObject):  # type: ignore[misc]
    """A ``VariantAutoscaling``: one Deployment serving one model on one accelerator at one cost."""

    version: ClassVar[str] = GROUP_VERSION
    endpoint: ClassVar[str] = "variantautoscalings"
    kind: ClassVar[str] = "VariantAutoscaling"
    plural: ClassVar[str] = "variantautoscalings"
    singular: ClassVar[str] = "variantautoscaling"
    namespaced: ClassVar[bool] = True


async def _patch(obj: Any, body: Mapping[str, Any], subresource: str, what: str) -> None:
    with translate_errors(what):
        await obj.async_patch(dict(body), subresource=subresource)


class KubeCluster:
    """The autoscaler's reads and writes against a real (or fake) API server."""

    def __init__(self, api: Api, *, watch_namespace: str = "", controller_instance: str = "") -> None:
        self._api = api
        self._namespace = watch_namespace
        self._instance = controller_instance

    async def _list(self, group_version: str, plural: str, namespace: str | None, selector: str = "") -> list[Obj]:
        items: list[Obj] = []
        params = {"limit": _PAGE}
        if selector:
            params["labelSelector"] = selector
        while True:
            body = await request_json(
                self._api, group_version=group_version, path=plural, namespace=namespace, params=params
            )
            items.extend(i for i in body.get("items") or () if isinstance(i, Mapping))
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items
            params = {**params, "continue": str(token)}

    async def list_variant_autoscalings(self) -> list[Obj]:
        selector = f"{CONTROLLER_INSTANCE_LABEL}={self._instance}" if self._instance else ""
        return await self._list(GROUP_VERSION, "variantautoscalings", self._namespace or None, selector)

    async def list_deployments(self, namespace: str) -> list[Obj]:
        return await self._list("apps/v1", "deployments", namespace)

    async def list_replicasets(self, namespace: str) -> list[Obj]:
        return await self._list("apps/v1", "replicasets", namespace)

    async def list_pods(self, namespace: str) -> list[Obj]:
        return await self._list("v1", "pods", namespace)

    async def get_configmap(self, namespace: str, name: str) -> Obj | None:
        try:
            return await request_json(self._api, group_version="v1", path=f"configmaps/{name}", namespace=namespace)
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise

    async def patch_variant_status(self, key: VariantKey, status: Mapping[str, Any]) -> None:
        va = VariantAutoscaling({"metadata": {"name": key.name, "namespace": key.namespace}}, api=self._api)
        await _patch(va, {"status": status}, "status", f"PATCH VariantAutoscaling {key}/status")

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        dep = Deployment({"metadata": {"name": name, "namespace": namespace}}, api=self._api)
        await _patch(dep, {"spec": {"replicas": replicas}}, "scale", f"PATCH Deployment {namespace}/{name}/scale")
