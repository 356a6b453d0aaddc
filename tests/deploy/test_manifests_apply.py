"""`kubectl apply` of every file in manifests/ against the fake API server, in the documented order.

The inference CRDs first, then stand-ins for the third-party CRDs a gateway installation and the
monitoring stack bring (``thirdparty_crds/``: Gateway API, Envoy Gateway, Istio, the Prometheus
Operator's PrometheusRule; and KEDA's ScaledObject, shipped in ``epp_sim.scalers``), then each
kustomization folder, the example variants (VariantAutoscalings, an annotated HPA and ScaledObject)
and the top-level kustomization. kubectl validates every object
against the served OpenAPI (unknown fields are errors) and the server checks schemas and RBAC
rules, so a broken manifest fails here. Each apply must name every object the step renders:
created when new, configured or unchanged when an earlier step applied it; applying the same
step again at once must leave every object unchanged; and ``kubectl get`` must list them all.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import yaml

from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp_sim.scalers import SCALED_OBJECT_CRD

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
THIRDPARTY_CRDS = Path(__file__).resolve().parent / "thirdparty_crds"
KUBECTL = str(Path(sys.executable).parent / "kubectl")
SAMPLE_VA = MANIFESTS / "autoscaler" / "sample-va.yaml"
PD = MANIFESTS / "overlays" / "pd"
"""Applied on a cluster of its own (test_the_pd_overlay_applies_on_a_fresh_cluster): it changes the sample
Deployment's selector, which a cluster holding the sample refuses (an immutable field)."""
SAMPLE_HPA = MANIFESTS / "autoscaler" / "sample-hpa.yaml"
SAMPLE_SCALED_OBJECT = MANIFESTS / "autoscaler" / "sample-scaledobject.yaml"
STEPS: tuple[tuple[str, Path], ...] = (
    ("-k", MANIFESTS / "crds"),
    ("-f", THIRDPARTY_CRDS),
    ("-f", SCALED_OBJECT_CRD),
    ("-k", MANIFESTS / "epp"),
    ("-k", MANIFESTS / "samples"),
    ("-k", MANIFESTS / "overlays" / "leader-election"),
    ("-k", MANIFESTS / "overlays" / "active-active-valkey"),
    ("-k", MANIFESTS / "autoscaler"),
    ("-f", SAMPLE_VA),
    ("-f", SAMPLE_HPA),
    ("-f", SAMPLE_SCALED_OBJECT),
    ("-k", MANIFESTS / "gateways" / "envoy-gateway"),
    ("-k", MANIFESTS / "gateways" / "istio"),
    ("-k", MANIFESTS / "observability"),
    ("-k", MANIFESTS),
)
"""(flag, path) in apply order: a CRD before its objects, the overlay after its base."""


class _Kubectl:
    """kubectl with the server's kubeconfig and a private HOME (discovery cache)."""

    def __init__(self, api: RunningApiServer, home: Path) -> None:
        self.env = {"HOME": str(home), "KUBECONFIG": str(api.kubeconfig), "PATH": "/usr/bin:/bin"}

    async def run(self, *args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            KUBECTL,
            *args,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        async with asyncio.timeout(30):
            out, err = await proc.communicate()
        assert proc.returncode == 0, f"kubectl {' '.join(args)} failed:\n{out.decode()}{err.decode()}"
        return out.decode()

    async def rendered(self, flag: str, path: Path) -> set[str]:
        """The objects one step applies, as kubectl names them (``deployment.apps/name``)."""
        if flag == "-k":
            return _refs(yaml.safe_load_all(await self.run("kustomize", str(path))))
        return await asyncio.to_thread(_file_refs, [path])


def _file_refs(paths: list[Path]) -> set[str]:
    """The objects in YAML files, or in the ``*.yaml`` files of directories (kustomization files skipped)."""
    files = [f for p in paths for f in (sorted(p.rglob("*.yaml")) if p.is_dir() else [p])]
    docs = (doc for f in files if f.name != "kustomization.yaml" for doc in yaml.safe_load_all(f.read_text()))
    return _refs(docs)


def _refs(docs: Any) -> set[str]:
    out = set()
    for doc in docs:
        if doc:
            group = str(doc["apiVersion"]).rpartition("/")[0]
            out.add(f"{str(doc['kind']).lower()}{'.' + group if group else ''}/{doc['metadata']['name']}")
    return out


def _applied(output: str) -> dict[str, str]:
    """``{object: created|configured|unchanged}`` from apply's output; any other line fails."""
    result: dict[str, str] = {}
    for line in output.splitlines():
        ref, _, verb = line.rpartition(" ")
        assert verb in ("created", "configured", "unchanged") and ref not in result, f"unexpected line {line!r}"
        result[ref] = verb
    return result


async def test_every_manifest_applies_reapplies_unchanged_and_is_listed(tmp_path: Path) -> None:
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        store = api.server.store
        kubectl = _Kubectl(api, tmp_path)
        rendered = await asyncio.gather(*(kubectl.rendered(flag, path) for flag, path in STEPS))

        every_file = await asyncio.to_thread(_file_refs, [MANIFESTS]) - await asyncio.to_thread(_file_refs, [PD])
        applied: set[str] = set()
        for (flag, path), objects in zip(STEPS, rendered, strict=True):
            step = f"apply {flag} {path.relative_to(MANIFESTS.parent)}"
            first = _applied(await kubectl.run("apply", flag, str(path)))
            assert first.keys() == objects, step
            for ref, verb in first.items():
                assert verb in (("configured", "unchanged") if ref in applied else ("created",)), (step, ref, verb)
            again = _applied(await kubectl.run("apply", flag, str(path)))
            assert again == dict.fromkeys(objects, "unchanged"), step
            applied |= objects
            if path.name == "leader-election":
                assert first["deployment.apps/vllm-llama3-8b-instruct-epp"] == "configured"
                picker = store.get("Deployment", "vllm-llama3-8b-instruct-epp", namespace="default")
                assert picker["spec"]["replicas"] == 3
                assert "--ha-enable-leader-election" in picker["spec"]["template"]["spec"]["containers"][0]["args"]
        assert every_file <= applied, f"files no step applies: {sorted(every_file - applied)}"

        kinds = sorted({ref.partition("/")[0] for ref in applied})
        listed = set((await kubectl.run("get", ",".join(kinds), "--all-namespaces", "-o", "name")).split())
        assert applied <= listed, sorted(applied - listed)

        pool = store.get("InferencePool.inference.networking.k8s.io", "vllm-llama3-8b-instruct", namespace="default")
        assert pool["spec"]["appProtocol"] == "http"  # schema default
        assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailClose"
        objective = store.get("InferenceObjective.inference.networking.x-k8s.io", "sheddable", namespace="default")
        assert objective["spec"]["priority"] == -1 and objective["spec"]["poolRef"]["kind"] == "InferencePool"
        model = store.get("InferenceModel", "food-review", namespace="default")
        assert [t["weight"] for t in model["spec"]["targetModels"]] == [50, 50]
        binding = store.get("ClusterRoleBinding", "epp-autoscaler")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "epp-autoscaler", "namespace": "workload-variant-autoscaler-system"}
        ]
        va = store.get("VariantAutoscaling", "llama-8b-h100", namespace="llm-production")
        assert va["spec"]["variantCost"] == "50.0" and "minReplicas" not in va["spec"]
        hpa = store.get("HorizontalPodAutoscaler", "llama-8b-a100", namespace="llm-production")
        assert hpa["metadata"]["annotations"]["llm-d.ai/managed"] == "true" and hpa["spec"]["minReplicas"] == 1
        scaled = store.get("ScaledObject", "llama-8b-h100", namespace="llm-production")
        assert scaled["spec"]["triggers"][0]["metadata"]["threshold"] == "1"
        route = store.get("HTTPRoute", "llm-route", namespace="default")  # istio's, applied after envoy-gateway's
        assert route["spec"]["rules"][0]["backendRefs"][0]["kind"] == "Service"


async def test_sample_variants_apply_on_a_fresh_cluster(tmp_path: Path) -> None:
    """Only the VariantAutoscaling CRD installed: the sample brings its own workload namespace."""
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        kubectl = _Kubectl(api, tmp_path)
        await kubectl.run("apply", "-f", str(MANIFESTS / "autoscaler" / "crd.yaml"))
        applied = _applied(await kubectl.run("apply", "-f", str(SAMPLE_VA)))
        assert applied == {
            "namespace/llm-production": "created",
            "variantautoscaling.llmd.ai/llama-8b-a100": "created",
            "variantautoscaling.llmd.ai/llama-8b-h100": "created",
        }


async def test_the_pd_overlay_applies_on_a_fresh_cluster(tmp_path: Path) -> None:
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        kubectl = _Kubectl(api, tmp_path)
        await kubectl.run("apply", "-k", str(MANIFESTS / "crds"))
        rendered = await kubectl.rendered("-k", PD)
        first = _applied(await kubectl.run("apply", "-k", str(PD)))
        assert first == dict.fromkeys(rendered, "created")
        assert _applied(await kubectl.run("apply", "-k", str(PD))) == dict.fromkeys(rendered, "unchanged")
        assert await asyncio.to_thread(_file_refs, [PD]) <= rendered  # the patches change objects it renders
        decode = api.server.store.get("Deployment", "vllm-llama3-8b-instruct", namespace="default")
        (sidecar,) = decode["spec"]["template"]["spec"]["initContainers"]
        assert sidecar["command"] == ["epp", "sidecar"] and sidecar["restartPolicy"] == "Always"
