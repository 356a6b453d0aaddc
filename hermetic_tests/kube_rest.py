"""A tiny REST client for the hermetic tests: create, patch and delete objects over HTTP.

Tests talk to the fake API server the way any client does (JSON over HTTP), so what the picker
sees arrives through real watches, never through a side door into the server's store.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yaml

__all__ = ["KubeRest", "load_manifest"]

CLUSTER_SCOPED = frozenset({"CustomResourceDefinition", "Namespace"})


def load_manifest(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


class KubeRest:
    """Plain-HTTP client for the objects the hermetic tests need."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeRest:
        self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use KubeRest as an async context manager"
        return self._session

    def path(self, api_version: str, kind: str, namespace: str | None, name: str = "") -> str:
        prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        plural = kind.lower() + "s"
        ns = "" if kind in CLUSTER_SCOPED or namespace is None else f"/namespaces/{namespace}"
        return f"{self.base_url}{prefix}{ns}/{plural}" + (f"/{name}" if name else "")

    async def _call(self, method: str, url: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body)
        async with self.session.request(method, url, data=data, headers={"Content-Type": content_type}) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise AssertionError(f"{method} {url} -> {resp.status}: {text}")
            return json.loads(text) if text else None

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        url = self.path(obj["apiVersion"], obj["kind"], meta.get("namespace", "default"))
        created: dict[str, Any] = await self._call("POST", url, obj)
        return created

    async def get(self, api_version: str, kind: str, name: str, namespace: str = "default") -> dict[str, Any]:
        got: dict[str, Any] = await self._call("GET", self.path(api_version, kind, namespace, name))
        return got

    async def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str = "default",
        subresource: str = "",
    ) -> dict[str, Any]:
        url = self.path(api_version, kind, namespace, name) + (f"/{subresource}" if subresource else "")
        patched: dict[str, Any] = await self._call("PATCH", url, patch, "application/merge-patch+json")
        return patched

    async def delete(self, api_version: str, kind: str, name: str, namespace: str = "default") -> None:
        await self._call("DELETE", self.path(api_version, kind, namespace, name))

    async def apply_crds(self, directory: Path) -> None:
        docs = await asyncio.to_thread(lambda: [d for p in sorted(directory.glob("*.yaml")) for d in load_manifest(p)])
        for doc in docs:
            if doc.get("kind") == "CustomResourceDefinition":
                await self.create(doc)

    async def create_ready_pod(
        self, name: str, ip: str, labels: Mapping[str, str], *, namespace: str = "default", ready: bool = True
    ) -> None:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
        }
        await self.create(pod)
        await self.set_pod_ready(name, ip, ready=ready, namespace=namespace)

    async def set_pod_ready(self, name: str, ip: str, *, ready: bool, namespace: str = "default") -> None:
        status = {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        await self.patch("v1", "Pod", name, {"status": status}, namespace=namespace, subresource="status")
