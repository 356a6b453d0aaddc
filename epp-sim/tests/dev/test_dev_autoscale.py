"""``epp dev --autoscale``: the local stack whose pool comes from a simulated Deployment that the
saturation autoscaler scales through an annotated HPA.

In process, with a ManualClock shared by the model-load delay, the autoscaler and the cluster's
scalers (their loops parked on a long interval, cycles driven by hand): saturated pods → the gauge
asks for one more replica → the HPA adds it → while it loads no second one (pending) → it turns
Ready, the picker routes to it through Envoy → teardown leaves nothing. Then the real command once,
as a subprocess, under ``--load``. Plus the pure parts (decision lines, peak readings).
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import aiohttp
import pytest
from epp_dev_cli import run_epp_dev

from epp.autoscale.controller import Outcome
from epp.autoscale.decision import Decision, Reason
from epp.autoscale.types import VariantKey
from epp.clock import ManualClock
from epp.framework.headers import DESTINATION_ENDPOINT
from epp_sim.dev.autoscale import AutoscaleConfig, DevAutoscaler, describe
from epp_sim.dev.dashboard import render_table
from epp_sim.stack.local import LocalStack, StackConfig, StackError
from epp_sim.waits import wait_until

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LOAD_DELAY = 30.0  # ManualClock seconds: a pod loads only when the test says so
SATURATED = {"waiting": 9, "kv_cache_usage": 0.9}


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(f"{entry.name}: {cmdline}")
    return found


def _spec_replicas(autoscaler: DevAutoscaler) -> int:
    return int(autoscaler.deployment()["spec"]["replicas"])


def _status_replicas(autoscaler: DevAutoscaler) -> int:
    return int((autoscaler.deployment().get("status") or {}).get("replicas") or 0)


async def test_saturation_adds_one_replica_that_the_picker_then_routes_to() -> None:
    clock = ManualClock()
    lines: list[str] = []
    autoscaler = DevAutoscaler(
        AutoscaleConfig(load_delay=LOAD_DELAY, interval=1e6, window=0, first_host=150, clock=clock),
        report=lines.append,
    )
    async with LocalStack(StackConfig(pods=0, envoy_port=0), components=[autoscaler]) as stack:
        ns = stack.samples.namespace
        key = autoscaler.variant
        # the loops ran their first cycle (nothing Ready: no metrics) and parked; the first pod is loading
        await wait_until(lambda: clock.sleepers == 3, timeout=10, message="pod loading and loops parked")
        assert len(lines) == 1 and lines[0].startswith(f"autoscaler: {key.name} 1, no-metrics: "), lines
        [row] = autoscaler.rows()
        assert row.state.startswith("Loading") and row.ip == "-"
        assert stack.pods == [], "no hand-made pods in this mode"

        clock.advance(LOAD_DELAY)
        await autoscaler.wait_ready(timeout=20)
        [first] = autoscaler.workloads.servers(ns).values()
        assert first.host == "127.0.0.150" and first.port == stack.target_port
        first.pin(**SATURATED)

        outcome = (await autoscaler.run_cycle())[key]
        assert outcome.decision is not None and not outcome.actuated, outcome  # the HPA scales, not the autoscaler
        assert (outcome.decision.current, outcome.decision.target, outcome.decision.reason) == (1, 2, Reason.SATURATED)
        assert _spec_replicas(autoscaler) == 2
        assert re.fullmatch(rf"autoscaler: {key.name} 1 → 2 \(saturated\): saturation: demand .*required.*", lines[-1])
        await wait_until(lambda: _status_replicas(autoscaler) == 2, timeout=10, message="second pod created")

        # the new replica is loading and load stays high: held, no second scale-up
        for _ in range(2):
            outcome = (await autoscaler.run_cycle())[key]
            assert outcome.decision is not None and not outcome.actuated
            assert (outcome.decision.current, outcome.decision.target) == (2, 2)
            assert outcome.decision.reason is Reason.PENDING
        assert _spec_replicas(autoscaler) == 2
        assert lines[-1] == f"autoscaler: {key.name} held at 2: pending (1 replica loading)"
        assert len(lines) == 3, "an unchanged decision is reported once"
        states = [r.state for r in autoscaler.rows()]
        assert states[0] == "Ready" and states[1].startswith("Loading"), states
        table = render_table(autoscaler.rows(), status=autoscaler.status())
        assert table.endswith(f"{lines[-1]}\n") and "Loading" in table

        clock.advance(LOAD_DELAY)
        await autoscaler.wait_ready(timeout=20)
        servers = autoscaler.workloads.servers(ns)
        [(new_name, new)] = [(n, s) for n, s in servers.items() if s is not first]
        assert [r.state for r in autoscaler.rows()] == ["Ready", "Ready"]

        # the first pod looks saturated to the picker too, so the new one takes the request
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello!"}], "max_tokens": 4}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            session.post(f"{stack.envoy_url}/v1/chat/completions", json=body) as resp,
        ):
            assert resp.status == 200, await resp.text()
            await resp.read()
        assert new.stats()["requests"] == 1 and first.stats()["requests"] == 0
        assert new.stats()["last_headers"][DESTINATION_ENDPOINT] == new.address
        assert new.address.startswith("127.0.0.151:")
        assert next(r for r in autoscaler.rows() if r.name == new_name).routed == 1

        pids, work_dir = stack.child_pids(), stack.work_dir
        addresses = [(s.host, s.port) for s in servers.values()]
    assert all(_pid_gone(pid) for pid in pids), "every child stopped by PID"
    assert not work_dir.exists() and not _processes_mentioning(str(work_dir))
    for host, port in addresses:
        with pytest.raises(OSError):
            await asyncio.open_connection(host, port)


def test_autoscale_config_is_validated() -> None:
    with pytest.raises(StackError, match="initial replicas"):
        AutoscaleConfig(initial_replicas=5, max_replicas=4)
    with pytest.raises(StackError, match="past .254"):
        AutoscaleConfig(first_host=250, max_replicas=8)
    with pytest.raises(StackError, match="window"):
        AutoscaleConfig(window=-1)
    assert AutoscaleConfig(first_host=10, max_replicas=2).hosts == ["127.0.0.10", "127.0.0.11"]


def test_decision_lines() -> None:
    key = VariantKey("default", "pool")

    def line(current: int, target: int, reason: Reason, message: str = "", **kw: object) -> str:
        return describe("pool", Outcome(key, Decision(key, current, target, reason, message)), **kw)  # type: ignore[arg-type]

    assert (
        line(1, 2, Reason.SATURATED, "1/1 replicas saturated")
        == "autoscaler: pool 1 → 2 (saturated): 1/1 replicas saturated"
    )
    assert line(2, 1, Reason.SCALE_DOWN, "fits") == "autoscaler: pool 2 → 1 (scale-down): fits"
    assert line(2, 2, Reason.PENDING, loading=1) == "autoscaler: pool held at 2: pending (1 replica loading)"
    assert line(3, 3, Reason.PENDING, loading=2) == "autoscaler: pool held at 3: pending (2 replicas loading)"
    assert line(2, 2, Reason.STEADY, "0/2 saturated") == "autoscaler: pool 2, steady: 0/2 saturated"
    failed = Outcome(key, Decision(key, 1, 2, Reason.SATURATED, "x"), error="scaling to 2 failed: 409")
    assert describe("pool", failed) == "autoscaler: pool 1 → 2 (saturated): x [scaling to 2 failed: 409]"
    assert describe("pool", Outcome(key, None, error="Deployment default/pool not found")) == (
        "autoscaler: pool: Deployment default/pool not found"
    )


async def test_epp_dev_autoscale_command_scales_up_under_load() -> None:
    returncode, out = await run_epp_dev(
        "--autoscale", "--model-load-delay", "1", "--autoscale-interval", "1", "--load", "--duration", "10", timeout=60
    )
    assert returncode == 0, out
    assert re.search(r"^autoscaler: vllm-llama3-8b-instruct 1 → 2 \(saturated\): ", out, re.M), out
    assert "pods from Deployment vllm-llama3-8b-instruct (1 initial, up to 4" in out
    statuses = dict(re.findall(r"(\S+): (\d+)", re.search(r"by status: (.*)", out).group(1)))  # type: ignore[union-attr]
    assert int(statuses["200"]) > 0, out
    work_dir = re.search(r"logs:\s+(\S+)", out).group(1)  # type: ignore[union-attr]
    assert not await asyncio.to_thread(Path(work_dir).exists)
    assert not _processes_mentioning(work_dir)


async def test_scale_to_zero_a_request_wakes_the_pool_and_is_served() -> None:
    """``--scale-to-zero``: no pod; a request waits in the picker's queue, the autoscaler sees it and scales 0 → 1."""
    clock = ManualClock()
    lines: list[str] = []
    config = AutoscaleConfig(
        initial_replicas=0,
        scale_to_zero=True,
        load_delay=LOAD_DELAY,
        interval=1e6,
        window=0,
        first_host=160,
        clock=clock,
    )
    autoscaler = DevAutoscaler(config, report=lines.append)
    async with LocalStack(
        StackConfig(pods=0, envoy_port=0, picker_args=config.picker_args), components=[autoscaler]
    ) as stack:
        key = autoscaler.variant
        outcome = (await autoscaler.run_cycle())[key]
        assert outcome.decision is not None and outcome.decision.reason is Reason.INACTIVE
        assert _spec_replicas(autoscaler) == 0

        body = {"model": MODEL, "messages": [{"role": "user", "content": "Wake up!"}], "max_tokens": 4}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

            async def ask() -> tuple[int, str]:
                async with session.post(f"{stack.envoy_url}/v1/chat/completions", json=body) as resp:
                    return resp.status, await resp.text()

            request = asyncio.ensure_future(ask())

            async def queued() -> bool:
                async with session.get(stack.picker.metrics_url) as resp:
                    text = await resp.text()
                return any(
                    line.startswith("inference_extension_flow_control_queue_size{") and not line.endswith(" 0.0")
                    for line in text.splitlines()
                )

            await wait_until(queued, timeout=20, message="the request waits in the picker's queue")
            outcome = (await autoscaler.run_cycle())[key]
            assert outcome.decision is not None and outcome.actuated, outcome
            assert (outcome.decision.current, outcome.decision.target) == (0, 1)
            assert outcome.decision.reason is Reason.WAKE
            assert lines[-1].startswith(f"autoscaler: {key.name} 0 → 1 (scale-from-zero): the picker holds 1 request")
            await wait_until(lambda: clock.sleepers >= 1, timeout=10, message="the new pod is loading")
            assert not request.done()
            clock.advance(LOAD_DELAY)
            await autoscaler.wait_ready(timeout=20)
            status, text = await asyncio.wait_for(request, 30)
        assert status == 200, text
        [server] = autoscaler.workloads.servers(stack.samples.namespace).values()
        assert server.stats()["requests"] == 1
