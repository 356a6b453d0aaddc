"""``epp sim apiserver --workloads`` runs the P/D pool of manifests/overlays/pd: its decode pods run the real sidecar.

The overlay's pool, prefill and decode Deployments and the sidecar's RBAC go to a fake API server
with kubectl; the simulated workload controller turns each Deployment into pods: a simulator on the
prefill pods' port, and on each decode pod a simulator behind ``epp sidecar``, a process of its own
started from the container's arguments (``$(NAMESPACE)`` expanded, SSRF protection on, reading the
pool through the API server). A request to a decode pod naming the prefill pod is prefilled there
and decoded here; a host outside the pool is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import yaml

from epp_sim.apiserver.fixture import running_apiserver
from epp_sim.stack.kubectl import Kubectl
from epp_sim.stack.manifests import MANIFESTS
from epp_sim.waits import wait_until
from epp_sim.workloads import WorkloadsController

PD = MANIFESTS / "overlays" / "pd"
POD_KINDS = ("InferencePool", "ServiceAccount", "Role", "RoleBinding")
PROMPT = "Explain the prefill and decode stages of a transformer. " * 20


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def test_the_pd_overlay_runs_as_simulated_pods(tmp_path: Path) -> None:
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        kubectl = Kubectl(api.kubeconfig, tmp_path)
        await kubectl.run("apply", "-k", str(MANIFESTS / "crds"))
        rendered = list(yaml.safe_load_all((await kubectl.run("kustomize", str(PD))).stdout))
        model_servers = [
            d for d in rendered if d and d["kind"] == "Deployment" and not d["metadata"]["name"].endswith("-epp")
        ]
        wanted = [d for d in rendered if d and d["kind"] in POD_KINDS] + model_servers
        manifest = tmp_path / "pd-pool.yaml"
        manifest.write_text(yaml.safe_dump_all(wanted))
        store = api.server.store
        async with WorkloadsController(store, first_host=201, kubeconfig=str(api.kubeconfig)) as workloads:
            await kubectl.run("apply", "-f", str(manifest))

            def pods() -> list[dict[str, Any]]:
                return store.list("pods", namespace="default")

            await wait_until(lambda: len(pods()) == 3 and all(_ready(p) for p in pods()), timeout=60)
            by_role = {
                p["metadata"]["name"]: (p["metadata"]["labels"]["llm-d.ai/role"], p["status"]["podIP"]) for p in pods()
            }
            (prefill_ip,) = [ip for role, ip in by_role.values() if role == "prefill"]
            decode = sorted((name, ip) for name, (role, ip) in by_role.items() if role == "decode")
            assert len(decode) == 2
            prefill_name = next(n for n, (role, _) in by_role.items() if role == "prefill")
            servers = workloads.servers("default")
            body = {"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": PROMPT, "max_tokens": 3}
            async with aiohttp.ClientSession() as http:
                target = f"http://{decode[0][1]}:8000/v1/completions"  # the sidecar, on the pool's port
                named = {"x-prefiller-host-port": f"{prefill_ip}:8000"}
                async with http.post(target, json=body, headers=named) as resp:
                    assert resp.status == 200, await resp.text()
                async with http.get(f"http://{decode[0][1]}:8000/metrics") as resp:
                    assert "vllm:num_requests_running" in await resp.text()  # the sidecar passes it to vLLM
                outsider = {"x-prefiller-host-port": "127.0.0.254:8000"}
                async with http.post(target, json=body, headers=outsider) as resp:
                    assert resp.status == 403  # not a pod of the pool
            assert servers[prefill_name].stats()["remote_decodes"] == 1
            assert servers[decode[0][0]].stats()["remote_prefills"] == 1
