"""The llm-d router's plugin types through a real Envoy: each group changes where requests go as upstream's READMEs say.

Filters (``label-selector-filter``, ``utilization-filter``, ``session-affinity-filter``), scorers
(``header-label-affinity-scorer`` over ``load-aware-scorer``), the profile handler
(``header-profile-handler``), the admission plugin (``probabilistic-admitter``, upstream's own sample
configuration), the flow-control policies (``program-aware-fairness`` and
``soft-reflective-ceiling-policy``, upstream's samples) and ``agent-identity`` (agent sessions as
flows). Pods get their labels the way a platform
team gives them: a patch of the Pod, which the picker watches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
import pytest
from pool_modes import ALL_MODES, CRD_MODES, POOL, served

from epp.plugins.program_aware_fairness import ProgramAwareFairness
from epp.plugins.soft_reflective_ceiling import SoftReflectiveCeiling
from epp_sim.kube_objects import PoolMode, inference_objective
from epp_sim.modelserver.config import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.envoy import ext_proc_problems
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

EXPERIMENTAL = ["--allow-experimental-plugins"]
SIM = SimConfig(model="m")
IDLE = {"waiting": 0, "kv_cache_usage": 0.1}


@dataclass
class Answer:
    status: int
    pod: int | None
    """Index of the simulator that served it (None: none did)."""
    headers: Mapping[str, str]
    text: str


async def _post(
    http: aiohttp.ClientSession, env: HermeticPool, prompt: str, headers: Mapping[str, str] | None = None
) -> Answer:
    before = [sim.stats()["requests"] for sim in env.servers]
    body = {"model": "m", "prompt": prompt, "max_tokens": 3}
    async with http.post(f"{env.envoy_url}/v1/completions", json=body, headers=headers or {}) as resp:
        text = await resp.text()
        answered = dict(resp.headers)
    grown = [i for i, sim in enumerate(env.servers) if sim.stats()["requests"] > before[i]]
    assert len(grown) <= 1
    return Answer(resp.status, grown[0] if grown else None, answered, text)


async def _label(env: HermeticPool, labels: list[dict[str, str]]) -> None:
    """Patch each pod's labels and wait until the picker's endpoints carry them."""
    for pod, extra in zip(env.pods, labels, strict=True):
        await env.cluster.patch("v1", "Pod", pod.name, {"metadata": {"labels": extra}})

    def seen() -> bool:
        by_ip = {s.endpoint.address: s.endpoint.labels for s in env.endpoints()}
        return all(
            all(by_ip.get(pod.ip, {}).get(k) == v for k, v in extra.items())
            for pod, extra in zip(env.pods, labels, strict=True)
        )

    await wait_until(seen, timeout=10, message=f"picker saw pod labels {labels}")


FILTERS = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: label-selector-filter
  parameters: {matchLabels: {hardware: H100}}
- type: utilization-filter
  parameters:
    conditions: [{metric: waiting-queue, maxValue: 5}]
- type: session-affinity-filter
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: label-selector-filter
  - pluginRef: utilization-filter
  - pluginRef: session-affinity-filter
  - pluginRef: queue-scorer
"""


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_filters_keep_labelled_pods_pin_the_session_and_drop_the_overloaded(
    epp_pool: PoolFactory, mode: PoolMode
) -> None:
    args = [*EXPERIMENTAL, "--config-text", FILTERS]
    env = await epp_pool(mode, pods=3, objects=served(mode, "m"), picker_args=args, sim_config=SIM, envoy=True)
    await _label(env, [{"hardware": "H100"}, {"hardware": "H100"}, {"hardware": "A100"}])
    await env.set_pins([IDLE, IDLE, {"waiting": 0, "kv_cache_usage": 0.0}])  # the A100 pod looks best
    async with aiohttp.ClientSession() as http:
        first = await _post(http, env, "hello")
        assert first.status == 200 and first.pod in (0, 1)  # never the A100 pod
        token = first.headers["x-session-token"]
        sticky, other = first.pod, 1 - first.pod
        pins = [dict(IDLE), dict(IDLE), dict(IDLE)]
        pins[sticky] = {"waiting": 3, "kv_cache_usage": 0.1}  # busier than its peer, but the session's pod
        await env.set_pins(pins)
        for i in range(3):
            again = await _post(http, env, f"turn {i}", {"x-session-token": token})
            assert (again.status, again.pod) == (200, sticky)
        assert (await _post(http, env, "no session")).pod == other  # load decides without a token
        pins[sticky] = {"waiting": 8, "kv_cache_usage": 0.1}  # over the utilization cap
        await env.set_pins(pins)
        moved = await _post(http, env, "turn 4", {"x-session-token": token})
        assert (moved.status, moved.pod) == (200, other)  # the session's pod was filtered out first
    assert ext_proc_problems(await env.envoy.counters()) == {}


SCORERS = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: load-aware-scorer
  parameters: {threshold: 10}
- type: header-label-affinity-scorer
  name: slice-affinity
  parameters: {headerName: x-disagg-slice, labelKey: disaggregatedset.x-k8s.io/slice}
- type: max-score-picker
schedulingProfiles:
- name: decode
  plugins:
  - {pluginRef: load-aware-scorer, weight: 1}
  - {pluginRef: slice-affinity, weight: 3}
  - pluginRef: max-score-picker
"""


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_scorers_prefer_the_requested_slice_over_a_shorter_queue(epp_pool: PoolFactory, mode: PoolMode) -> None:
    args = [*EXPERIMENTAL, "--config-text", SCORERS]
    env = await epp_pool(mode, pods=3, objects=served(mode, "m"), picker_args=args, sim_config=SIM, envoy=True)
    slice_label = "disaggregatedset.x-k8s.io/slice"
    await _label(env, [{slice_label: "0"}, {slice_label: "1"}, {slice_label: "1"}])
    await env.set_pins(
        [
            {"waiting": 0, "kv_cache_usage": 0.1},
            {"waiting": 6, "kv_cache_usage": 0.1},
            {"waiting": 4, "kv_cache_usage": 0.1},
        ]
    )
    async with aiohttp.ClientSession() as http:
        assert (await _post(http, env, "no slice")).pod == 0  # load-aware alone: the empty queue
        for i in range(3):  # slice 1 (weight 3) outweighs any queue (load-aware tops at 0.5)
            assert (await _post(http, env, f"slice {i}", {"x-disagg-slice": "1"})).pod == 2
        assert (await _post(http, env, "slice 7", {"x-disagg-slice": "7"})).pod == 0  # no such slice: load
    assert ext_proc_problems(await env.envoy.counters()) == {}


HANDLER = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: label-selector-filter
  name: prefill-pods
  parameters: {matchLabels: {llm-d.ai/role: prefill}}
- type: label-selector-filter
  name: decode-pods
  parameters: {matchLabels: {llm-d.ai/role: decode}}
- type: header-profile-handler
- type: queue-scorer
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: prefill-pods}, {pluginRef: queue-scorer}]
- name: decode
  plugins: [{pluginRef: decode-pods}, {pluginRef: queue-scorer}]
"""


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_header_profile_handler_runs_the_profile_the_header_names(epp_pool: PoolFactory, mode: PoolMode) -> None:
    args = [*EXPERIMENTAL, "--config-text", HANDLER]
    env = await epp_pool(mode, pods=2, objects=served(mode, "m"), picker_args=args, sim_config=SIM, envoy=True)
    await _label(env, [{"llm-d.ai/role": "prefill"}, {"llm-d.ai/role": "decode"}])
    async with aiohttp.ClientSession() as http:
        assert (await _post(http, env, "p", {"EPP-Profile": "prefill"})).pod == 0
        assert (await _post(http, env, "d", {"epp-profile": "decode"})).pod == 1
        assert (await _post(http, env, "default")).pod == 1  # no header: defaultProfile decode
        unknown = await _post(http, env, "x", {"EPP-Profile": "encode"})
        assert (unknown.status, unknown.pod) == (429, None)  # upstream's answer to a profile nobody configured
        assert unknown.text.startswith("inference error: ResourceExhausted - failed to find target endpoint")
    assert ext_proc_problems(await env.envoy.counters()) == {}


# Upstream's own sample (deploy/config/probabilistic-admitter-epp-config.yaml): the utilization detector is
# neutered so the admitter alone decides.
ADMITTER = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: probabilistic-admitter
- type: random-picker
- type: utilization-detector
  parameters:
    queueDepthThreshold: 999999999
    kvCacheUtilThreshold: 1.0
flowControl:
  saturationDetector:
    pluginRef: utilization-detector
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: random-picker
"""


@pytest.mark.parametrize("mode", CRD_MODES)  # priorities come from InferenceObjectives
async def test_probabilistic_admitter_sheds_sheddable_work_as_the_pool_saturates(
    epp_pool: PoolFactory, mode: PoolMode
) -> None:
    objects = [inference_objective("batch", -1, POOL, mode=mode), *served(mode, "m")]
    args = ["--config-text", ADMITTER]
    env = await epp_pool(mode, pods=2, objects=objects, picker_args=args, sim_config=SIM, envoy=True)
    batch = {"x-gateway-inference-objective": "batch"}
    await env.set_pins([IDLE, IDLE])  # saturation 0.125: p = 0.125^5 × 300 ≈ 0.009
    async with aiohttp.ClientSession() as http:
        assert [(await _post(http, env, f"calm {i}", batch)).status for i in range(3)].count(200) >= 2
        await env.set_pins([{"waiting": 4, "kv_cache_usage": 0.5}] * 2)  # saturation 0.8: p = 1
        shed = await _post(http, env, "busy", batch)
        assert (shed.status, shed.pod) == (500, None)
        assert shed.text == (
            "inference error: Internal - request cannot be admitted: inference error: ResourceExhausted - "
            "probabilistic-admitter: rejected, saturation=0.800 prob=1.00"
        )
        assert (await _post(http, env, "interactive")).status == 200  # priority 0 is never shed
    assert ext_proc_problems(await env.envoy.counters()) == {}


# Upstream's samples: deploy/config/sim-program-aware-config.yaml and soft-reflective-ceiling-epp-config.yaml.
PROGRAM_AWARE = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: program-aware-fairness
- type: queue-scorer
- type: max-score-picker
- type: single-profile-handler
featureGates:
- flowControl
flowControl:
  defaultPriorityBand:
    fairnessPolicyRef: program-aware-fairness
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
"""
SOFT_CEILING = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates:
- flowControl
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: soft-reflective-ceiling-policy
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2.0
  - pluginRef: kv-cache-utilization-scorer
    weight: 2.0
  - pluginRef: prefix-cache-scorer
    weight: 3.0
flowControl:
  usageLimitPolicyPluginRef: soft-reflective-ceiling-policy
"""


async def test_program_aware_fairness_accounts_each_programs_service_through_envoy(epp_pool: PoolFactory) -> None:
    env = await epp_pool("v1", pods=2, picker_args=["--config-text", PROGRAM_AWARE], sim_config=SIM, envoy=True)
    policy = env.runtime.pools[0].routing.config.plugins["program-aware-fairness"]
    assert isinstance(policy, ProgramAwareFairness)
    async with aiohttp.ClientSession() as http:
        for program, count in (("agent-a", 3), ("agent-b", 1)):
            for i in range(count):
                answer = await _post(http, env, f"{program} step {i}", {"x-llm-d-inference-fairness-id": program})
                assert answer.status == 200
    await wait_until(lambda: all(p.in_flight == 0 for p in policy.programs.values()))
    a, b = policy.programs["agent-a"], policy.programs["agent-b"]
    assert (a.dispatched, b.dispatched) == (3, 1)  # every request went through the queue and PreRequest
    assert a.service > b.service > 0  # the real responses' usage: agent-b would be served first now
    assert ext_proc_problems(await env.envoy.counters()) == {}


AGENT_SESSIONS = PROGRAM_AWARE.replace(
    "- type: program-aware-fairness\n", "- type: program-aware-fairness\n- type: agent-identity\n"
)


async def test_agent_sessions_are_flows_through_envoy(epp_pool: PoolFactory) -> None:
    """agent-identity (upstream's sample pairs it with program-aware-fairness): each agent session is a program."""
    args = [*EXPERIMENTAL, "--config-text", AGENT_SESSIONS]
    env = await epp_pool("v1", pods=2, picker_args=args, sim_config=SIM, envoy=True)
    policy = env.runtime.pools[0].routing.config.plugins["program-aware-fairness"]
    assert isinstance(policy, ProgramAwareFairness)
    sessions = [
        {"x-claude-code-session-id": "claude-1"},
        {"x-claude-code-session-id": "claude-1"},
        {"session-id": "codex-9"},
        {"session-id": "codex-9", "x-llm-d-inference-fairness-id": "tenant-a"},  # explicit wins
        {},
    ]
    async with aiohttp.ClientSession() as http:
        for i, headers in enumerate(sessions):
            assert (await _post(http, env, f"turn {i}", headers)).status == 200
    await wait_until(lambda: all(p.in_flight == 0 for p in policy.programs.values()))
    dispatched = {name: p.dispatched for name, p in policy.programs.items()}
    assert dispatched == {"claude-1": 2, "codex-9": 1, "tenant-a": 1, "default-flow": 1}
    for flow, count in (("claude-1", 2), ("codex-9", 1), ("tenant-a", 1), ("default-flow", 1)):
        labels = {"model_name": "m", "target_model_name": "m", "priority": "0", "fairness_id": flow}
        assert env.sample("llm_d_epp_request_total", **labels) == count
    assert ext_proc_problems(await env.envoy.counters()) == {}


@pytest.mark.parametrize("mode", CRD_MODES)  # two priority bands: priorities come from InferenceObjectives
async def test_soft_reflective_ceiling_gates_the_lower_band_only_while_the_pool_is_busy(
    epp_pool: PoolFactory, mode: PoolMode
) -> None:
    objects = [inference_objective("batch", -1, POOL, mode=mode), *served(mode, "m")]
    args = [*EXPERIMENTAL, "--config-text", SOFT_CEILING]
    env = await epp_pool(mode, pods=2, objects=objects, picker_args=args, sim_config=SIM, envoy=True)
    policy = env.runtime.pools[0].routing.flow_control.settings.usage_limit  # type: ignore[union-attr]
    assert isinstance(policy, SoftReflectiveCeiling)
    async with aiohttp.ClientSession() as http:
        assert (await _post(http, env, "interactive")).status == 200
        assert (await _post(http, env, "calm batch", {"x-gateway-inference-objective": "batch"})).status == 200
        assert policy.tick == 0  # saturation low: no band past its reflection, nothing alternates
        await env.set_pins([{"waiting": 0, "kv_cache_usage": 0.6}] * 2)  # saturation 0.75: the lower band alternates
        busy = await _post(http, env, "busy batch", {"x-gateway-inference-objective": "batch"})
        assert busy.status == 200  # held back on some dispatch cycles, never refused
        assert policy.tick > 0
    assert ext_proc_problems(await env.envoy.counters()) == {}
