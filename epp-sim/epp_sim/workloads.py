"""Simulated Deployment and ReplicaSet controllers: Deployments become pods that load a model.

Runs against the store's in-process API (no HTTP), like kube-controller-manager would:

- each Deployment gets one ReplicaSet per pod template (``<name>-<pod-template-hash>``, owned by
  the Deployment; a template change replaces it, i.e. the Recreate strategy), and the ReplicaSet
  gets ``spec.replicas`` pods owned by it (``<replicaset>-<5 seeded random characters>``, never
  the name of a pod that exists), labelled from the template plus the hash;
- a new pod is ``Pending`` / not Ready, without an IP, for ``load_delay`` seconds of ``clock``
  (the model loading); then it is ``Running`` and Ready, with a podIP of its own (``127.0.0.x``)
  where, with ``model_servers`` (the default), a simulated vLLM server
  (:class:`~epp_sim.modelserver.fixture.ModelServer`) answers; without, nothing listens there;
- scale-down deletes not-Ready pods first, then the newest (the ReplicaSet controller's order),
  and stops their servers;
- ReplicaSet and Deployment ``status`` (``replicas``, ``readyReplicas``, ``updatedReplicas``,
  ``availableReplicas``, ``observedGeneration``) always describe the pods that exist.

Each pod's address and port are fixed when it is created: the template's first container port,
or with ``port=0`` a free port on its address, written into the pod's container port (so tests
running side by side cannot collide and a scraper finds it where the pod says).

Pods already in the store when the controller starts (a store restored from a data directory)
are adopted, since an API-server restart does not restart pods: each keeps its address, a Ready
one gets its simulator back at once, and one that was still loading loads again from the start.

A pod whose template runs ``epp sidecar`` (a decode pod of disaggregated serving,
``manifests/overlays/pd``) gets the real sidecar as a process of its own in front of its
simulator (:mod:`epp_sim.pod_containers`), and is Ready once both answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from epp.clock import Clock, SystemClock
from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.kinds import Obj
from epp_sim.apiserver.store import Store
from epp_sim.kube_objects import pod_status_loading, pod_status_ready
from epp_sim.modelserver.config import SimConfig
from epp_sim.modelserver.fixture import ModelServer
from epp_sim.pod_containers import SidecarProcess, sidecar_container

__all__ = ["WorkloadsController", "sim_config_from_template"]

log = logging.getLogger(__name__)

HASH_LABEL = "pod-template-hash"
_DEFAULT_PORT = 8000
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

PodKey = tuple[str, str]


def sim_config_from_template(template: Obj) -> SimConfig:
    """The served model from the first container's ``--model X``, ``--model=X`` or ``serve X`` arguments."""
    containers = (template.get("spec") or {}).get("containers") or [{}]
    words = [str(w) for w in (containers[0].get("command") or []) + (containers[0].get("args") or [])]
    for word in words:
        if word.startswith("--model="):
            return SimConfig(model=word.removeprefix("--model="))
    for flag in ("--model", "serve"):
        if flag in words and words.index(flag) + 1 < len(words):
            return SimConfig(model=words[words.index(flag) + 1])
    return SimConfig()


def _template_hash(template: Obj) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return "".join(_ALPHABET[int(digest[i : i + 2], 16) % len(_ALPHABET)] for i in range(0, 20, 2))


def _owned_by(obj: Obj, uid: str) -> bool:
    return any(r.get("uid") == uid and r.get("controller") for r in obj["metadata"].get("ownerReferences") or ())


def _owner_ref(kind: str, obj: Obj) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _first_container_port(spec: Obj) -> int:
    ports = [p for c in spec.get("containers") or () for p in c.get("ports") or ()]
    return int((ports or [{}])[0].get("containerPort") or _DEFAULT_PORT)


def _ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


class WorkloadsController:
    """Keeps Deployments, ReplicaSets and pods consistent in a :class:`Store`; start once, stop once."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        load_delay: float = 0.0,
        base_ip: str = "127.0.0.",
        first_host: int = 100,
        port: int | None = None,
        sim_config: Callable[[Obj], SimConfig] = sim_config_from_template,
        model_servers: bool = True,
        seed: int = 0,
        kubeconfig: str = "",
    ) -> None:
        """``kubeconfig``: what a pod's ``epp sidecar`` reads the pool with (SSRF protection)."""
        if load_delay < 0:
            raise ValueError(f"load_delay must be >= 0 seconds, got {load_delay}")
        if not 1 <= first_host <= 254:
            raise ValueError(f"first_host must be in 1..254, got {first_host}")
        self._store = store
        self._clock = clock or SystemClock()
        self.load_delay = load_delay
        self._base_ip = base_ip
        self._hosts = list(range(first_host, 255))
        self._port = port
        self._sim_config = sim_config
        self._model_servers = model_servers
        self._rng = random.Random(seed)
        self._servers: dict[PodKey, ModelServer] = {}
        self._sidecars: dict[PodKey, SidecarProcess] = {}
        self._kubeconfig = kubeconfig
        self._logs: Path | None = None
        self._loading: dict[PodKey, asyncio.Task[None]] = {}
        self._addresses: dict[PodKey, tuple[int, int]] = {}  # host index in base_ip, port
        self._watchers: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._watchers:
            raise RuntimeError("workloads controller already started")
        self._adopt()
        self._watchers = [
            asyncio.create_task(self._watch_deployments(), name="sim-workloads-deployments"),
            asyncio.create_task(self._watch_pods(), name="sim-workloads-pods"),
        ]

    async def stop(self) -> None:
        tasks = self._watchers + list(self._loading.values())
        self._watchers, self._loading = [], {}
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        sidecars, self._sidecars = list(self._sidecars.values()), {}
        await asyncio.gather(*(s.stop() for s in sidecars), return_exceptions=True)
        servers, self._servers = list(self._servers.values()), {}
        await asyncio.gather(*(s.stop() for s in servers), return_exceptions=True)

    async def __aenter__(self) -> WorkloadsController:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def server(self, namespace: str, pod: str) -> ModelServer:
        """The simulator behind a pod (to pin its load); KeyError until the pod has one."""
        return self._servers[(namespace, pod)]

    def servers(self, namespace: str) -> dict[str, ModelServer]:
        """Pod name → simulator, for the pods of ``namespace`` that have one."""
        return {name: s for (ns, name), s in self._servers.items() if ns == namespace}

    # ------------------------------------------------------------------------------ watches

    async def _watch_deployments(self) -> None:
        async with self._store.subscribe("deployments") as watch:
            async for _, event in watch:
                meta = event.object["metadata"]
                self._guarded(self._reconcile, meta.get("namespace", ""), meta["name"])

    async def _watch_pods(self) -> None:
        async with self._store.subscribe("pods") as watch:
            async for event_type, event in watch:
                meta = event.object["metadata"]
                key = (meta.get("namespace", ""), meta["name"])
                if event_type == "DELETED" or meta.get("deletionTimestamp"):
                    await self._retire(key)
                for dep in self._deployments_of(event.object):
                    self._guarded(self._reconcile, key[0], dep)

    def _guarded(self, fn: Callable[[str, str], None], namespace: str, name: str) -> None:
        """Reconcile errors are logged, never end the watch (a real controller requeues)."""
        try:
            fn(namespace, name)
        except (ApiError, RuntimeError, OSError) as e:
            log.warning("workloads reconcile failed", extra={"object": f"{namespace}/{name}", "error": str(e)})

    def _replicaset_of(self, pod: Obj) -> Obj | None:
        ns = pod["metadata"].get("namespace", "")
        for ref in pod["metadata"].get("ownerReferences") or ():
            if ref.get("kind") == "ReplicaSet":
                return self._store.lookup(self._store.type_of("replicasets"), ref["name"], ns)
        return None

    def _deployments_of(self, pod: Obj) -> list[str]:
        rs = self._replicaset_of(pod)
        refs = () if rs is None else rs["metadata"].get("ownerReferences") or ()
        return [r["name"] for r in refs if r.get("kind") == "Deployment"]

    def _adopt(self) -> None:
        """Take over the pods of Deployments that a previous run left in the store (see the module doc)."""
        pods = self._store.select(self._store.type_of("pods"), None)
        for pod in sorted(pods, key=lambda p: "podIP" not in (p.get("status") or {})):  # addresses kept first
            meta = pod["metadata"]
            rs = self._replicaset_of(pod)
            if rs is None or meta.get("deletionTimestamp") or not self._deployments_of(pod):
                continue
            ip = str((pod.get("status") or {}).get("podIP") or "")
            index = ip.removeprefix(self._base_ip)
            host = self._take_host(int(index) if ip.startswith(self._base_ip) and index.isdigit() else None)
            key = (meta.get("namespace", ""), meta["name"])
            self._addresses[key] = (host, _first_container_port(pod.get("spec") or {}))
            self._start_loading(key, rs["spec"]["template"], 0.0 if _ready(pod) else self.load_delay)

    # ------------------------------------------------------------------------------ reconcile

    def _reconcile(self, ns: str, name: str) -> None:
        dep = self._store.lookup(self._store.type_of("deployments"), name, ns)
        if dep is None or dep["metadata"].get("deletionTimestamp"):
            return  # garbage collection removes the ReplicaSets and pods through ownerReferences
        spec = dep.get("spec") or {}
        template = spec.get("template") or {}
        want = 1 if spec.get("replicas") is None else int(spec["replicas"])
        rs = self._ensure_replicaset(dep, template, want)
        pods = self._pods_of(ns, rs["metadata"]["uid"])
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if len(live) < want:
            for _ in range(want - len(live)):
                live.append(self._create_pod(rs, template))
        elif len(live) > want:
            # not Ready before Ready, then newest first (the ReplicaSet controller's ranking)
            newest_first = sorted(
                live, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]), reverse=True
            )
            doomed = sorted(newest_first, key=_ready)  # stable: not-Ready pods go first, then the newest
            for pod in doomed[: len(live) - want]:
                self._store.delete("pods", pod["metadata"]["name"], namespace=ns)
                live.remove(pod)
        ready = sum(1 for p in live if _ready(p))
        counts = {"replicas": len(live), "readyReplicas": ready, "availableReplicas": ready}
        self._set_status(
            "replicasets",
            rs,
            {**counts, "fullyLabeledReplicas": len(live), "observedGeneration": rs["metadata"].get("generation", 1)},
        )
        self._set_status(
            "deployments",
            dep,
            {
                **counts,
                "updatedReplicas": len(live),
                "unavailableReplicas": max(0, want - ready),
                "observedGeneration": dep["metadata"].get("generation", 1),
            },
        )

    def _ensure_replicaset(self, dep: Obj, template: Obj, want: int) -> Obj:
        ns, uid = dep["metadata"].get("namespace", ""), dep["metadata"]["uid"]
        h = _template_hash(template)
        name = f"{dep['metadata']['name']}-{h}"
        rt = self._store.type_of("replicasets")
        for old in self._store.select(rt, ns):
            if _owned_by(old, uid) and old["metadata"]["name"] != name:
                self._store.delete(rt, old["metadata"]["name"], namespace=ns)  # Recreate: old pods go too
        rs = self._store.lookup(rt, name, ns)
        selector = dict((dep.get("spec") or {}).get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: h}
        labels = {**((template.get("metadata") or {}).get("labels") or {}), HASH_LABEL: h}
        pod_template = {**template, "metadata": {**(template.get("metadata") or {}), "labels": labels}}
        if rs is None:
            body = {
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": labels,
                    "ownerReferences": [_owner_ref("Deployment", dep)],
                },
                "spec": {"replicas": want, "selector": selector, "template": pod_template},
            }
            return self._store.create(rt, body, namespace=ns)
        if (rs.get("spec") or {}).get("replicas") != want:
            return self._store.patch(rt, name, {"spec": {"replicas": want}}, namespace=ns)
        return rs

    def _pods_of(self, ns: str, rs_uid: str) -> list[Obj]:
        return [p for p in self._store.select(self._store.type_of("pods"), ns) if _owned_by(p, rs_uid)]

    def _take_host(self, wanted: int | None = None) -> int:
        """``wanted`` if it is free, else the first free host index in ``base_ip``."""
        if wanted in self._hosts:
            self._hosts.remove(wanted)
            return wanted
        if not self._hosts:
            raise RuntimeError(f"no free {self._base_ip}x address left for another pod")
        return self._hosts.pop(0)

    def _allocate(self, template: Obj) -> tuple[int, int]:
        """A free ``127.0.0.x`` and the port its server will use (a free one when ``port=0``)."""
        host = self._take_host()
        if self._port == 0:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((f"{self._base_ip}{host}", 0))
                return host, int(sock.getsockname()[1])
        if self._port is not None:
            return host, self._port
        return host, _first_container_port(template.get("spec") or {})

    def _pod_name(self, rs_name: str, ns: str) -> str:
        """A new pod name; a restored store may already hold the ones this seed gave before."""
        while True:
            name = f"{rs_name}-" + "".join(self._rng.choice(_ALPHABET) for _ in range(5))
            if self._store.lookup(self._store.type_of("pods"), name, ns) is None:
                return name

    def _create_pod(self, rs: Obj, template: Obj) -> Obj:
        ns = rs["metadata"].get("namespace", "")
        name = self._pod_name(rs["metadata"]["name"], ns)
        spec = json.loads(json.dumps(template.get("spec") or {}))
        spec.setdefault("nodeName", "sim-node")
        host, port = self._allocate(template)
        containers = spec.setdefault("containers", [{"name": "main"}])
        ports = containers[0].setdefault("ports", [])
        if ports:
            ports[0]["containerPort"] = port
        else:
            ports.append({"containerPort": port})
        labels = rs["spec"]["template"]["metadata"]["labels"]
        body = {
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": labels,
                "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                "ownerReferences": [_owner_ref("ReplicaSet", rs)],
            },
            "spec": spec,
        }
        try:
            pod = self._store.create("pods", body, namespace=ns)
        except ApiError:
            self._hosts.append(host)
            raise
        key = (ns, pod["metadata"]["name"])
        self._addresses[key] = (host, port)
        status = pod_status_loading(containers=spec["containers"])
        pod = self._store.patch("pods", key[1], {"status": status}, namespace=ns, subresource="status")
        self._start_loading(key, template, self.load_delay)
        return pod

    def _start_loading(self, key: PodKey, template: Obj, delay: float) -> None:
        self._loading[key] = asyncio.create_task(
            self._load(key, template, delay), name=f"sim-pod-load-{key[0]}-{key[1]}"
        )

    async def _load(self, key: PodKey, template: Obj, delay: float) -> None:
        """Model loading: after ``delay`` the pod gets its server (if any), an IP, and turns Ready."""
        try:
            await self._clock.sleep(delay)
            host_index, port = self._addresses[key]
            host = f"{self._base_ip}{host_index}"
            if self._model_servers:
                server = ModelServer(self._sim_config(template), host=host, port=port)
                await server.start()
                self._servers[key] = server
                await self._start_sidecar(key, template, host, port)
            pod = self._store.lookup(self._store.type_of("pods"), key[1], key[0])
            if pod is None:
                await self._retire(key)  # deleted while its server was starting
                return
            status = pod_status_ready(host, containers=pod["spec"]["containers"], pod_uid=pod["metadata"]["uid"])
            self._store.patch("pods", key[1], {"status": status}, namespace=key[0], subresource="status")
            log.info("sim pod ready", extra={"pod": f"{key[0]}/{key[1]}", "address": f"{host}:{port}"})
        except asyncio.CancelledError:
            raise
        except (OSError, RuntimeError, ApiError) as e:  # a sidecar that does not start: ChildProcessError
            log.error("sim pod failed to start", extra={"pod": f"{key[0]}/{key[1]}", "error": str(e)})
        finally:
            self._loading.pop(key, None)

    async def _start_sidecar(self, key: PodKey, template: Obj, host: str, engine_port: int) -> None:
        """The template's ``epp sidecar`` container, as a process in front of the pod's simulator."""
        container = sidecar_container(template.get("spec") or {})
        if container is None:
            return
        if self._logs is None:
            self._logs = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="epp-sim-sidecars-"))
        sidecar = SidecarProcess(
            container,
            namespace=key[0],
            pod=key[1],
            ip=host,
            engine_port=engine_port,
            log_dir=self._logs,
            kubeconfig=self._kubeconfig,
        )
        await sidecar.start()
        self._sidecars[key] = sidecar

    async def _retire(self, key: PodKey) -> None:
        task = self._loading.pop(key, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        sidecar = self._sidecars.pop(key, None)
        if sidecar is not None:
            await sidecar.stop()
        address = self._addresses.pop(key, None)
        server = self._servers.pop(key, None)
        if server is not None:
            await server.stop()
        if address is not None:
            self._hosts.append(address[0])

    def _set_status(self, kind: str, obj: Obj, status: dict[str, Any]) -> None:
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        self._store.patch(
            kind,
            obj["metadata"]["name"],
            {"status": status},
            namespace=obj["metadata"].get("namespace"),
            subresource="status",
        )
