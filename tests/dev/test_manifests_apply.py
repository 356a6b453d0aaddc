"""`kubectl apply` of manifests/ against the fake API server: the CRDs install, the samples then
validate against them (kubectl fetches the served OpenAPI) and get the schema defaults.

The fake server does not serve ServiceAccount or RBAC kinds, so of the picker's objects only the
ConfigMap, Deployment and Service are applied here; the gateway folders need the Gateway API,
Envoy Gateway and Istio CRDs, which are not ours to install.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from epp.sim.apiserver.fixture import RunningApiServer, running_apiserver

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
KUBECTL = str(Path(sys.executable).parent / "kubectl")


async def _kubectl(api: RunningApiServer, home: Path, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        *args,
        env={"HOME": str(home), "KUBECONFIG": str(api.kubeconfig), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    text = out.decode()
    assert proc.returncode == 0, f"kubectl {' '.join(args)} failed:\n{text}"
    return text


async def _get(api: RunningApiServer, home: Path, resource: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(await _kubectl(api, home, "get", resource, name, "-o", "json"))
    return obj


async def test_crds_then_samples_and_picker_apply(tmp_path: Path) -> None:
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        created = await _kubectl(api, tmp_path, "apply", "-k", str(MANIFESTS / "crds"))
        assert created.count("customresourcedefinition.apiextensions.k8s.io/") == 5

        samples = await _kubectl(api, tmp_path, "apply", "-k", str(MANIFESTS / "samples"))
        assert samples.count(" created") == 6, samples
        for name in ("configmap.yaml", "deployment.yaml", "service.yaml"):
            await _kubectl(api, tmp_path, "apply", "-f", str(MANIFESTS / "epp" / name))

        pool = await _get(api, tmp_path, "inferencepools.inference.networking.k8s.io", "vllm-llama3-8b-instruct")
        assert pool["spec"]["appProtocol"] == "http"  # schema default
        assert pool["spec"]["endpointPickerRef"]["group"] == ""  # schema default
        assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailClose"
        objective = await _get(api, tmp_path, "inferenceobjectives.inference.networking.x-k8s.io", "sheddable")
        assert objective["spec"]["priority"] == -1
        assert objective["spec"]["poolRef"]["kind"] == "InferencePool"  # schema default
        model = await _get(api, tmp_path, "inferencemodels.inference.networking.x-k8s.io", "food-review")
        assert [t["weight"] for t in model["spec"]["targetModels"]] == [50, 50]
        picker = await _get(api, tmp_path, "deployments.apps", "vllm-llama3-8b-instruct-epp")
        assert "--pool-name=vllm-llama3-8b-instruct" in picker["spec"]["template"]["spec"]["containers"][0]["args"]

        again = await _kubectl(api, tmp_path, "apply", "-k", str(MANIFESTS / "samples"))
        assert again.count(" unchanged") == 6, again
