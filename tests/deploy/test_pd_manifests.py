"""manifests/overlays/pd: the P/D pool as rendered agrees with itself and with what epp reads.

The picker's configuration loads with the real loader (the disagg handler and its decider), the
decode pods' sidecar arguments are accepted by ``epp sidecar``'s own option parser, the ports line up
(the pool's target port is the sidecar's and the prefill vLLM's; the sidecar's model-server port
is the decode vLLM's), the stages' selectors do not overlap, and the sidecar may read only what
SSRF protection needs.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import yaml

from epp.config.loader import load_config
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.plugins import register_in_tree
from epp.sidecar.options import SidecarOptions
from epp_sim.stack.sidecars import sidecar_options

PD = Path(__file__).resolve().parents[2] / "manifests" / "overlays" / "pd"
POOL = "vllm-llama3-8b-instruct"


async def _rendered(home: Path) -> dict[tuple[str, str], dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "kubectl"),
        "kustomize",
        str(PD),
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


def _sidecar(decode: dict[str, Any]) -> tuple[dict[str, Any], SidecarOptions]:
    (sidecar,) = decode["spec"]["template"]["spec"]["initContainers"]
    args = [a.replace("$(NAMESPACE)", "default") for a in sidecar["args"]]
    return sidecar, sidecar_options(*args)


async def test_the_pd_pool_agrees_with_itself_and_with_epp(tmp_path: Path) -> None:
    objects = await _rendered(tmp_path)
    registry = PluginRegistry()
    register_in_tree(registry)
    config = load_config(objects["ConfigMap", f"{POOL}-epp"]["data"]["epp-config.yaml"], registry, PluginContext())
    assert config.scheduler.profile_handler.typed_name.type == "disagg-profile-handler"
    assert set(config.scheduler.profiles) == {"prefill", "decode"}

    pool = objects["InferencePool", POOL]
    (target,) = [p["number"] for p in pool["spec"]["targetPorts"]]
    decode, prefill = objects["Deployment", POOL], objects["Deployment", f"{POOL}-prefill"]
    sidecar, options = _sidecar(decode)
    picker = objects["Deployment", f"{POOL}-epp"]["spec"]["template"]["spec"]["containers"][0]
    assert sidecar["image"] == picker["image"] and sidecar["command"] == ["epp", "sidecar"]
    assert options.ssrf_protection and (options.pool_namespace, options.pool_name) == ("default", POOL)
    assert not options.secure_proxy and options.local_prefill_fallback
    (vllm,) = decode["spec"]["template"]["spec"]["containers"]
    assert options.port == target == sidecar["ports"][0]["containerPort"]
    assert options.model_server_port == vllm["ports"][0]["containerPort"] == 8200
    assert "--port=8200" in vllm["args"]
    (prefill_vllm,) = prefill["spec"]["template"]["spec"]["containers"]
    assert prefill_vllm["ports"][0]["containerPort"] == target and "--port=8000" in prefill_vllm["args"]
    connector = '--kv-transfer-config={"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    assert connector in vllm["args"] and connector in prefill_vllm["args"]

    labels = {
        name: d["spec"]["template"]["metadata"]["labels"] for name, d in (("decode", decode), ("prefill", prefill))
    }
    assert labels["decode"]["llm-d.ai/role"] == "decode" and labels["prefill"]["llm-d.ai/role"] == "prefill"
    for deployment in (decode, prefill):
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert pool["spec"]["selector"]["matchLabels"].items() <= selector.items()  # the pool selects both
        other = labels["prefill"] if deployment is decode else labels["decode"]
        assert not selector.items() <= other.items()  # neither Deployment claims the other's pods

    account = decode["spec"]["template"]["spec"]["serviceAccountName"]
    role = objects["Role", account]
    granted = {
        (g, r, tuple(rule["verbs"])) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert granted == {
        ("", "pods", ("get", "list", "watch")),
        ("inference.networking.k8s.io", "inferencepools", ("get", "list", "watch")),
    }
    binding = objects["RoleBinding", account]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "default"}]
