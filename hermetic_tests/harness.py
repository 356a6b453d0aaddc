"""The hermetic environment: fake API server + real picker runtime + simulated model servers.

``hermetic(mode=...)`` starts the fake Kubernetes API server, applies the CRDs from
``manifests/crds``, starts N model-server simulators on distinct loopback IPs (127.0.0.2...)
sharing one port, creates the pool and Ready pods through the API, runs the real picker
(``epp.runtime.Runtime``, gRPC over loopback) and waits until it is ready and has scraped every
pod. Tests then drive ext_proc streams exactly as Envoy would and assert the exact endpoint,
headers, metadata and body.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import grpc
from kube_rest import KubeRest

from epp.config.options import V1_GROUP, V1ALPHA2_GROUP, ServeOptions
from epp.extproc import pb
from epp.framework.endpoint import EndpointState
from epp.runtime import Runtime
from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp_sim.modelserver.config import SimConfig
from epp_sim.modelserver.fixture import ModelServer, model_servers
from epp_sim.ports import free_port
from epp_sim.stack.extproc_client import (
    ExtProcCall,
    destination_metadata,
    post_headers,
    request_body,
    request_headers,
    set_headers,
    streamed,
)
from epp_sim.waits import wait_until

__all__ = ["POOL", "Env", "Routed", "hermetic", "picker_options"]

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "manifests" / "crds"
POOL = "vllm-llama3-8b-instruct"
LABELS = {"app": POOL}
Mode = Literal["v1", "v1alpha2", "standalone"]


@dataclass
class Routed:
    """What the picker answered for one request."""

    status: int  # 200 = routed; otherwise the ImmediateResponse status
    endpoint: str = ""
    metadata_endpoint: str = ""
    headers: dict[str, bytes] = field(default_factory=dict)
    body: bytes = b""
    error: bytes = b""


@dataclass
class Env:
    api: RunningApiServer
    kube: KubeRest
    runtime: Runtime
    sims: list[ModelServer]
    channel: Any
    mode: Mode

    @property
    def port(self) -> int:
        return self.sims[0].port

    def endpoints(self) -> Sequence[EndpointState]:
        return self.runtime.pools[0].datastore.endpoints()

    def addresses(self) -> set[str]:
        return {e.endpoint.hostport for e in self.endpoints()}

    def hostport(self, index: int) -> str:
        return f"{self.sims[index].host}:{self.port}"

    def open(self) -> ExtProcCall:
        return ExtProcCall(pb.ExternalProcessorStub(self.channel))

    def sample(self, name: str, **labels: str) -> float:
        value = self.runtime.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    async def route(
        self,
        body: Mapping[str, Any] | bytes,
        *,
        path: str = "/v1/completions",
        headers: Mapping[str, str] | None = None,
        chunks: int = 1,
        subset: list[Any] | None = None,
    ) -> Routed:
        """One FULL_DUPLEX_STREAMED request: headers, the body in ``chunks`` pieces, the answer."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        call = self.open()
        await call.send(request_headers(post_headers(path, **dict(headers or {})), subset=subset))
        size = max(1, -(-len(raw) // chunks))
        pieces = [raw[i : i + size] for i in range(0, len(raw), size)] or [b""]
        for i, piece in enumerate(pieces):
            await call.send(request_body(piece, eos=i == len(pieces) - 1))
        first = await call.recv_one()
        if first.HasField("immediate_response"):
            await call.end()
            return Routed(first.immediate_response.status.code, error=first.immediate_response.body)
        mutation = first.request_headers.response.header_mutation
        out = bytearray()
        while True:
            chunk, eos = streamed(await call.recv_one())
            out += chunk
            if eos:
                break
        await call.end()
        headers_set = set_headers(mutation)
        return Routed(
            200,
            endpoint=headers_set["x-gateway-destination-endpoint"].decode(),
            metadata_endpoint=destination_metadata(first),
            headers=headers_set,
            body=bytes(out),
        )

    async def set_pins(self, pins: Sequence[Mapping[str, Any]]) -> None:
        """Pin each simulator's reported metrics and wait until the picker has scraped them."""
        for sim, pin in zip(self.sims, pins, strict=True):
            sim.pin(**pin)
        await self.wait_scraped(pins)

    async def wait_scraped(self, pins: Sequence[Mapping[str, Any]]) -> None:
        by_ip = {sim.host: pin for sim, pin in zip(self.sims, pins, strict=True)}

        def matches() -> bool:
            states = {s.endpoint.address: s.metrics for s in self.endpoints()}
            for ip, pin in by_ip.items():
                m = states.get(ip)
                if m is None or not m.updated_at:
                    return False
                if "waiting" in pin and m.waiting_queue != pin["waiting"]:
                    return False
                if "kv_cache_usage" in pin and abs(m.kv_cache_usage - pin["kv_cache_usage"]) > 1e-9:
                    return False
                if "running_loras" in pin and m.active_adapters != frozenset(pin["running_loras"]):
                    return False
            return True

        await wait_until(matches, timeout=10, message=f"picker scraped pins {pins}")


def _pool_object(mode: Mode, port: int) -> dict[str, Any]:
    if mode == "v1alpha2":
        return {
            "apiVersion": f"{V1ALPHA2_GROUP}/v1alpha2",
            "kind": "InferencePool",
            "metadata": {"name": POOL, "namespace": "default"},
            "spec": {"selector": dict(LABELS), "targetPortNumber": port, "extensionRef": {"name": "epp"}},
        }
    return {
        "apiVersion": f"{V1_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": {"name": POOL, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": dict(LABELS)},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
        },
    }


def picker_options(kubeconfig: Path, **fields: Any) -> ServeOptions:
    """Options for an in-process picker on loopback: free ports, plaintext, fast scraping."""
    defaults: dict[str, Any] = {
        "pool_namespace": "default",
        "bind_address": "127.0.0.1",
        "grpc_port": 0,
        "grpc_health_port": 0,
        "metrics_port": 0,
        "secure_serving": False,
        "kubeconfig": str(kubeconfig),
        "refresh_metrics_interval": 0.02,
    }
    return ServeOptions(**{**defaults, **fields})


@asynccontextmanager
async def hermetic(
    mode: Mode = "v1",
    *,
    pods: int = 3,
    sim_config: SimConfig | None = None,
    objects: Sequence[Mapping[str, Any]] = (),
    config_text: str = "",
    config_file: Path | None = None,
    seed: int = 7,
    apiserver_options: Mapping[str, Any] | None = None,
) -> AsyncIterator[Env]:
    """Everything up, the pool synced and every pod scraped; torn down in reverse on exit."""
    port = free_port("127.0.0.2")
    async with (
        running_apiserver(**dict(apiserver_options or {})) as api,
        KubeRest(api.url) as kube,
        model_servers(pods, port=port, config=sim_config or SimConfig(max_loras=4)) as sims,
    ):
        await kube.apply_crds(CRDS)
        if mode != "standalone":
            await kube.create(_pool_object(mode, port))
        for obj in objects:
            await kube.create(obj)
        for i, sim in enumerate(sims):
            await kube.create_ready_pod(f"pod-{i}", sim.host, LABELS)
        options = picker_options(
            api.kubeconfig,
            pool_names=() if mode == "standalone" else (POOL,),
            pool_group=V1ALPHA2_GROUP if mode == "v1alpha2" else V1_GROUP,
            endpoint_selector=",".join(f"{k}={v}" for k, v in LABELS.items()) if mode == "standalone" else "",
            endpoint_target_ports=(port,) if mode == "standalone" else (),
            config_text=config_text,
            config_file=str(config_file or ""),
        )
        runtime = Runtime(options, rng=random.Random(seed), readiness_interval=0.02)
        await runtime.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{runtime.ports.grpc}")
        env = Env(api, kube, runtime, list(sims), channel, mode)
        try:
            expected = {f"{sim.host}:{port}" for sim in sims}
            await wait_until(lambda: runtime.ready and env.addresses() == expected, timeout=15, message="pool synced")
            await wait_until(
                lambda: all(s.metrics.updated_at for s in env.endpoints()), timeout=10, message="every pod scraped"
            )
            yield env
        finally:
            await channel.close()
            await runtime.stop(grace=1.0)
