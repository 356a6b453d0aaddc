"""kr8s behind the autoscaler's :class:`~epp.autoscale.cluster.Cluster` protocol.

Declares the ``VariantAutoscaling`` kind (``llmd.ai/v1alpha1``, short name ``va``) as a kr8s class,
reads lists through ``epp.kube.client`` (one error boundary, paginated with ``limit``/``continue``)
and writes only through the ``status`` and ``scale`` subresources and the Events API, so the
autoscaler never touches a workload's or a scaler's spec. A kind the cluster does not serve (404
on its list: the CRD is not installed) reads as absent, not as a failure. Every kr8s/httpx error
leaves here as a ``KubeError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from kr8s.asyncio.objects import APIObject

from epp.autoscale.cluster import Obj
from epp.autoscale.scaletargets import LWS, LWS_GROUP_VERSION
from epp.autoscale.types import VariantKey
from epp.kube.client import Api, KubeApiError, call_json, request_json, translate_errors

__all__ = ["GROUP_VERSION", "KubeCluster", "VariantAutoscaling"]

GROUP_VERSION = "llmd.ai/v1alpha1"
_PAGE = "500"
_MERGE = "application/merge-patch+json"


class VariantAutoscaling(APIObject):  # type: ignore[misc]
    """A ``VariantAutoscaling``: one workload serving one model on one accelerator at one cost."""

    version: ClassVar[str] = GROUP_VERSION
    endpoint: ClassVar[str] = "variantautoscalings"
    kind: ClassVar[str] = "VariantAutoscaling"
    plural: ClassVar[str] = "variantautoscalings"
    singular: ClassVar[str] = "variantautoscaling"
    namespaced: ClassVar[bool] = True


class KubeCluster:
    """The autoscaler's reads and writes against a real (or fake) API server."""

    def __init__(self, api: Api, *, watch_namespace: str = "") -> None:
        self._api = api
        self._namespace = watch_namespace

    async def _list(self, group_version: str, plural: str, namespace: str | None) -> list[Obj]:
        items: list[Obj] = []
        params = {"limit": _PAGE}
        while True:
            body = await request_json(
                self._api, group_version=group_version, path=plural, namespace=namespace, params=params
            )
            items.extend(i for i in body.get("items") or () if isinstance(i, Mapping))
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items
            params = {**params, "continue": str(token)}

    async def _optional(self, group_version: str, plural: str, namespace: str | None) -> list[Obj] | None:
        try:
            return await self._list(group_version, plural, namespace)
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise

    async def list_variant_autoscalings(self) -> list[Obj] | None:
        return await self._optional(GROUP_VERSION, "variantautoscalings", self._namespace or None)

    async def list_hpas(self) -> list[Obj]:
        return await self._optional("autoscaling/v2", "horizontalpodautoscalers", self._namespace or None) or []

    async def list_scaled_objects(self) -> list[Obj] | None:
        return await self._optional("keda.sh/v1alpha1", "scaledobjects", self._namespace or None)

    async def list_deployments(self, namespace: str) -> list[Obj]:
        return await self._list("apps/v1", "deployments", namespace)

    async def list_leaderworkersets(self, namespace: str) -> list[Obj]:
        return await self._optional(LWS_GROUP_VERSION, "leaderworkersets", namespace) or []

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
        with translate_errors(f"PATCH VariantAutoscaling {key}/status"):
            await va.async_patch({"status": dict(status)}, subresource="status")

    async def scale(self, namespace: str, kind: str, name: str, replicas: int) -> None:
        group_version, plural = (LWS_GROUP_VERSION, "leaderworkersets") if kind == LWS else ("apps/v1", "deployments")
        await call_json(
            self._api,
            "PATCH",
            group_version=group_version,
            path=f"{plural}/{name}/scale",
            namespace=namespace,
            body={"spec": {"replicas": replicas}},
            content_type=_MERGE,
        )

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        await call_json(self._api, "POST", group_version="v1", path="events", namespace=namespace, body=dict(event))

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        await call_json(
            self._api,
            "PATCH",
            group_version="v1",
            path=f"events/{name}",
            namespace=namespace,
            body=dict(patch),
            content_type=_MERGE,
        )
