"""A fake cluster to test against: the fake API server, a REST client for it, and the real kubectl.

Everything a test or a local stack puts into the cluster goes in the way any client would do it:
JSON over HTTP (server-side apply, create, merge patch, delete), so what the picker sees arrives
through real watches, never through a side door into the server's store. ``kubectl`` runs the
real binary with this cluster's kubeconfig. The API server object itself (``.server``) stays
reachable for what only a test harness does: injecting faults, restarting, compacting.

Resource paths come from the server's discovery documents, like kubectl's, so a custom resource
with an irregular plural works once its CRD is applied.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp

from epp.tasks import Service
from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp_sim.apiserver.server import ApiServer
from epp_sim.kube_objects import pod, pod_status_ready
from epp_sim.stack.kubectl import Kubectl
from epp_sim.stack.manifests import read_manifests

__all__ = ["ClusterError", "FakeCluster"]

_APPLY = "application/apply-patch+yaml"
_MERGE = "application/merge-patch+json"
_FIELD_MANAGER = "epp-sim"


class ClusterError(RuntimeError):
    """The API server refused a request; the message has the verb, the path and its Status text."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class FakeCluster(Service):
    """A started fake API server with a client: ``async with FakeCluster() as cluster:``.

    ``apiserver_options`` go to :class:`~epp_sim.apiserver.server.ApiServer` (history limit,
    bookmark interval, pod grace period, ...).
    """

    def __init__(self, *, namespace: str = "default", work_dir: Path | None = None, **apiserver_options: Any) -> None:
        self.namespace = namespace
        self._work_dir = work_dir
        self._options = apiserver_options
        self._exit = AsyncExitStack()
        self._running: RunningApiServer | None = None
        self._session: aiohttp.ClientSession | None = None
        self._plurals: dict[tuple[str, str], tuple[str, bool]] = {}
        self._kubectl: Kubectl | None = None

    # ------------------------------------------------------------------ lifecycle and accessors

    async def start(self) -> None:
        work = self._work_dir
        if work is None:
            work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="epp-sim-cluster-"))
            self._exit.push_async_callback(asyncio.to_thread, shutil.rmtree, work, True)
        self._running = await self._exit.enter_async_context(
            running_apiserver(kubeconfig_path=work / "kubeconfig", namespace=self.namespace, **self._options)
        )
        self._session = await self._exit.enter_async_context(aiohttp.ClientSession())
        self._kubectl = Kubectl(self._running.kubeconfig, work / "kubectl-home")

    async def stop(self) -> None:
        exit_stack, self._exit = self._exit, AsyncExitStack()
        await exit_stack.aclose()
        self._session = None  # the server object stays readable (``.server.serving`` is False now)

    @property
    def server(self) -> ApiServer:
        """The fake API server itself: fault injection, restarts, compaction."""
        return self._need_running().server

    @property
    def url(self) -> str:
        return self._need_running().url

    @property
    def kubeconfig(self) -> Path:
        return self._need_running().kubeconfig

    def _need_running(self) -> RunningApiServer:
        if self._running is None:
            raise RuntimeError("FakeCluster is not started")
        return self._running

    # ------------------------------------------------------------------ kubectl

    async def kubectl(self, *args: str, check: bool = True) -> str:
        """Run the real kubectl against this cluster; its stdout (``check``: fail on a non-zero exit)."""
        if self._kubectl is None:
            raise RuntimeError("FakeCluster is not started")
        return (await self._kubectl.run(*args, check=check)).stdout

    # ------------------------------------------------------------------ REST

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply (create or update), as ``kubectl apply --server-side`` sends it."""
        url = await self._url(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], self._ns_of(obj))
        applied: dict[str, Any] = await self._call(
            "PATCH", f"{url}?fieldManager={_FIELD_MANAGER}&force=true", obj, _APPLY
        )
        if obj.get("kind") == "CustomResourceDefinition":
            self._plurals.clear()  # a new kind is served: discovery changed
        return applied

    async def apply_all(self, docs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [await self.apply(doc) for doc in docs]

    async def apply_manifests(self, *paths: Path) -> list[dict[str, Any]]:
        """Apply every document of these YAML files or folders, CRDs first."""
        return await self.apply_all(await asyncio.to_thread(read_manifests, *paths))

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        url = await self._url(obj["apiVersion"], obj["kind"], "", self._ns_of(obj))
        created: dict[str, Any] = await self._call("POST", url, obj)
        return created

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        got: dict[str, Any] = await self._call("GET", await self._url(api_version, kind, name, namespace))
        return got

    async def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> dict[str, Any]:
        """JSON merge patch of the object (or of its ``status`` / ``scale`` subresource)."""
        url = await self._url(api_version, kind, name, namespace)
        patched: dict[str, Any] = await self._call(
            "PATCH", f"{url}/{subresource}" if subresource else url, patch, _MERGE
        )
        return patched

    async def delete(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> None:
        await self._call("DELETE", await self._url(api_version, kind, name, namespace))

    # ------------------------------------------------------------------ pods

    async def create_ready_pod(
        self,
        name: str,
        ip: str,
        labels: Mapping[str, str],
        *,
        port: int | None = None,
        namespace: str | None = None,
        ready: bool = True,
    ) -> dict[str, Any]:
        """A Pod running at ``ip`` (Ready unless ``ready=False``), as a kubelet would report it."""
        ns = namespace or self.namespace
        await self.create(pod(name, labels, namespace=ns, port=port))
        return await self.set_pod_ready(name, ip, ready=ready, namespace=ns)

    async def set_pod_ready(self, name: str, ip: str, *, ready: bool, namespace: str | None = None) -> dict[str, Any]:
        """The kubelet's readiness verdict changes (a probe starts failing, or passes again)."""
        return await self.patch(
            "v1", "Pod", name, {"status": pod_status_ready(ip, ready=ready)}, namespace=namespace, subresource="status"
        )

    # ------------------------------------------------------------------ plumbing

    def _ns_of(self, obj: Mapping[str, Any]) -> str:
        return str((obj.get("metadata") or {}).get("namespace") or self.namespace)

    async def _url(self, api_version: str, kind: str, name: str, namespace: str | None) -> str:
        plural, namespaced = await self._resource(api_version, kind)
        prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        scope = f"/namespaces/{namespace or self.namespace}" if namespaced else ""
        return f"{self.url}{prefix}{scope}/{plural}" + (f"/{name}" if name else "")

    async def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of ``kind`` from the group-version's discovery document (cached)."""
        key = (api_version, kind)
        if key not in self._plurals:
            prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
            listing = await self._call("GET", f"{self.url}{prefix}")
            for resource in listing.get("resources", []):
                if "/" not in resource["name"]:
                    self._plurals[(api_version, resource["kind"])] = (resource["name"], bool(resource["namespaced"]))
            if key not in self._plurals:
                raise ClusterError(f"the API server serves no kind {kind} in {api_version}", 404)
        return self._plurals[key]

    async def _call(self, method: str, url: str, body: Any = None, content_type: str = "application/json") -> Any:
        if self._session is None:
            raise RuntimeError("FakeCluster is not started")
        data = None if body is None else json.dumps(body)
        async with self._session.request(method, url, data=data, headers={"Content-Type": content_type}) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise ClusterError(f"{method} {url} -> {resp.status}: {text}", resp.status)
            return json.loads(text) if text else None
