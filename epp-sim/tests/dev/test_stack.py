"""``epp dev`` end to end: the local stack routes a completion to the simulator the picker chose,
streams SSE, applies the sample rewrite, and leaves nothing behind; plus the pure parts (the
dashboard's formatting, the seeded workload)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
from epp_dev_cli import run_epp_dev

from epp.framework.headers import DESTINATION_ENDPOINT, OBJECTIVE
from epp_sim.dev.dashboard import Dashboard, PodRow, pod_row, render_line, render_table
from epp_sim.dev.load import LoadConfig, plan_requests
from epp_sim.stack.local import LocalStack, StackConfig, StackError
from epp_sim.stack.samples import load_samples

KUBECTL = str(Path(sys.executable).parent / "kubectl")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the sample Deployment's --model


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes whose argv contains ``text`` (the stack's work directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


async def _chat(
    session: aiohttp.ClientSession, url: str, body: dict[str, object], **headers: str
) -> aiohttp.ClientResponse:
    return await session.post(f"{url}/v1/chat/completions", json=body, headers=headers)


class RecordingComponent:
    """A stand-in for ``epp dev --autoscale``'s part: sees the stack up at start, Envoy still up at stop."""

    name = "recorder"
    hosts = ("127.0.0.9",)  # the pool's target port must be free here too

    def __init__(self) -> None:
        self.events: list[str] = []
        self._stack: LocalStack | None = None

    async def start(self, stack: LocalStack) -> None:
        self._stack = stack
        self.events.append(f"start {stack.envoy_url}")

    async def stop(self) -> None:
        assert self._stack is not None
        self.events.append(f"stop, envoy alive: {not _pid_gone(self._stack.envoy.pid)}")


async def test_local_stack_routes_streams_and_leaves_nothing_behind(tmp_path: Path) -> None:
    component = RecordingComponent()
    async with LocalStack(StackConfig(pods=3, envoy_port=0), components=[component]) as stack:
        assert component.events == [f"start {stack.envoy_url}"]
        assert [p.name for p in stack.pods] == [f"vllm-llama3-8b-instruct-{i}" for i in range(3)]
        assert {s.port for s in stack.servers} == {stack.target_port}, "the pool's single target port fits every pod"
        ports = [
            ("127.0.0.1", stack.envoy.port),
            ("127.0.0.1", stack.envoy.admin_port),
            ("127.0.0.1", stack.cluster.server.port),
            *(("127.0.0.1", p) for p in (stack.picker.grpc_port, stack.picker.health_port, stack.picker.metrics_port)),
            *((s.host, s.port) for s in stack.servers),
        ]
        pids = stack.child_pids()
        work_dir = stack.work_dir
        assert len(pids) == 2 and not any(_pid_gone(pid) for pid in pids)

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello!"}], "max_tokens": 8}
            async with await _chat(session, stack.envoy_url, body) as resp:
                assert resp.status == 200, await resp.text()
                completion = await resp.json()
            assert completion["model"] == MODEL
            assert completion["usage"]["completion_tokens"] == 8
            served = [s for s in stack.servers if s.stats()["requests"] == 1]
            assert [s.stats()["requests"] for s in stack.servers].count(0) == 2 and len(served) == 1
            chosen = served[0].stats()
            assert chosen["last_headers"][DESTINATION_ENDPOINT] == served[0].address
            assert chosen["by_model"] == {MODEL: 1}

            stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
            async with await _chat(session, stack.envoy_url, stream_body) as resp:
                assert resp.status == 200
                assert resp.headers["content-type"].startswith("text/event-stream")
                events = [line for line in (await resp.text()).splitlines() if line.startswith("data: ")]
            assert events[-1] == "data: [DONE]"
            assert json.loads(events[0][6:])["choices"][0]["delta"]["role"] == "assistant"
            assert json.loads(events[-2][6:])["usage"]["completion_tokens"] == 8

            # The sample rewrite sends "food-review" to an adapter; a named objective is admitted.
            lora_body = {**body, "model": "food-review"}
            async with await _chat(session, stack.envoy_url, lora_body, **{OBJECTIVE: "sheddable"}) as resp:
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["model"] == "food-review", "the client sees the model it asked for"
            assert sum(s.stats()["requests"] for s in stack.servers) == 3
            served_models = [m for s in stack.servers for m in s.stats()["by_model"]]
            assert {"food-review-1", "food-review-2"} & set(served_models), served_models

        kubectl = await asyncio.create_subprocess_exec(
            KUBECTL,
            "--kubeconfig",
            str(stack.kubeconfig),
            "get",
            "pods",
            "-o",
            "name",
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await kubectl.communicate()
        assert out.decode().split() == [f"pod/vllm-llama3-8b-instruct-{i}" for i in range(3)]

    assert component.events[1:] == ["stop, envoy alive: True"], "components stop first"
    assert all(_pid_gone(pid) for pid in pids), "every child stopped by PID"
    assert not work_dir.exists()
    assert not _processes_mentioning(str(work_dir))
    busy = [(host, port) for host, port in ports if not _port_free(host, port)]
    assert not busy, f"ports still bound after teardown: {busy}"


async def test_failed_start_stops_what_had_started() -> None:
    """The picker cannot be ready in 10 ms: by then the API server and simulators run; all must stop."""
    stack = LocalStack(StackConfig(pods=2, envoy_port=0, ready_timeout=0.01))
    with pytest.raises(StackError, match="not ready within 0.01s"):
        await stack.start()
    assert _pid_gone(stack.picker.pid)
    assert not await asyncio.to_thread(stack.work_dir.exists)
    assert all(_port_free(s.host, s.port) for s in stack.servers)
    assert not stack.cluster.server.serving


async def test_bad_manifests_fail_with_the_file_named(tmp_path: Path) -> None:
    broken = tmp_path / "manifests"
    (broken / "crds").mkdir(parents=True)
    (broken / "crds" / "kustomization.yaml").write_text("apiVersion: v1\nkind: Kustomization\nresources: []\n")
    stack = LocalStack(StackConfig(pods=2, envoy_port=0, manifests=broken))
    with pytest.raises(StackError, match="samples/kustomization.yaml"):
        await stack.start()
    assert not await asyncio.to_thread(stack.work_dir.exists)


def test_samples_come_from_the_manifests() -> None:
    samples = load_samples(Path(__file__).resolve().parents[3] / "manifests")
    assert samples.name == "vllm-llama3-8b-instruct" and samples.namespace == "default"
    assert samples.model == MODEL and samples.max_loras == 2
    assert samples.deployment_name == "vllm-llama3-8b-instruct"
    assert samples.adapters == ("food-review-1", "food-review-2")
    assert samples.rewritten_models == ("food-review",)
    assert samples.objective_names == ("critical", "sheddable")
    assert samples.pod_labels["app"] == "vllm-llama3-8b-instruct"
    assert len(samples.crds) == 7  # objectives and rewrites in both llm-d.ai and inference.networking.x-k8s.io


def test_stack_config_is_validated() -> None:
    with pytest.raises(StackError, match="pods"):
        StackConfig(pods=-1)
    assert StackConfig(pods=0).pods == 0, "components may bring every pod"
    with pytest.raises(StackError, match="past .254"):
        StackConfig(pods=300)
    with pytest.raises(StackError, match="time_scale"):
        StackConfig(time_scale=0)


async def test_epp_dev_command_runs_load_and_exits_clean() -> None:
    returncode, out = await run_epp_dev("--pods", "2", "--load", "--duration", "2", timeout=45)
    assert returncode == 0, out
    assert re.search(r"^  curl -sS http://127\.0\.0\.1:\d+/v1/chat/completions .*Llama-3\.1-8B-Instruct", out, re.M), (
        out
    )
    sent = int(re.search(r"^load: (\d+) requests", out, re.M).group(1))  # type: ignore[union-attr]
    statuses = dict(re.findall(r"(\S+): (\d+)", re.search(r"by status: (.*)", out).group(1)))  # type: ignore[union-attr]
    assert sent > 0 and int(statuses["200"]) > 0, out
    assert set(statuses) <= {"200", "429"} and sum(map(int, statuses.values())) == sent, "only sheddable may be shed"
    work_dir = re.search(r"logs:\s+(\S+)", out).group(1)  # type: ignore[union-attr]
    envoy_port = int(re.search(r"Envoy:\s+http://127\.0\.0\.1:(\d+)", out).group(1))  # type: ignore[union-attr]
    assert not await asyncio.to_thread(Path(work_dir).exists)
    assert not _processes_mentioning(work_dir)
    assert _port_free("127.0.0.1", envoy_port)


# ---------------------------------------------------------------------------------- dashboard

STATS = {
    "requests": 30,
    "waiting": 2,
    "running": 5,
    "kv_cache_usage": 0.375,
    "loaded_adapters": ["food-review-1"],
    "resident_adapters": ["food-review-1", "food-review-2"],
}


def test_pod_row_reads_sim_stats() -> None:
    row = pod_row("pod-a", "127.0.0.2", STATS)
    assert row == PodRow("pod-a", "127.0.0.2", 2, 5, 0.375, ("food-review-1", "food-review-2*"), 30, "Ready")
    assert pod_row("pod-b", "-", {}, state="Loading 3s") == PodRow("pod-b", "-", 0, 0, 0.0, (), 0, "Loading 3s")


def test_render_table_columns_shares_and_totals() -> None:
    rows = [pod_row("pod-a", "127.0.0.2", STATS), pod_row("pod-b", "127.0.0.3", {"requests": 10, "running": 1})]
    text = render_table(rows, rates={"pod-a": 3.0, "pod-b": 0.5}, title="pool p", status="autoscaler: p 1 → 2")
    lines = text.splitlines()
    assert lines[0] == "pool p"
    assert lines[2].split() == [
        "pod-a", "127.0.0.2", "Ready", "2", "5", "37.5%", "████······", "food-review-1,", "food-review-2*", "30",
        "(75%)", "3.0",
    ]  # fmt: skip
    assert lines[3].split() == [
        "pod-b",
        "127.0.0.3",
        "Ready",
        "0",
        "1",
        "0.0%",
        "··········",
        "-",
        "10",
        "(25%)",
        "0.5",
    ]
    assert lines[4] == "2 pods · 2 queued · 6 running · 40 routed · 3.5 req/s"
    assert lines[5] == "autoscaler: p 1 → 2"
    assert "\x1b[" not in text
    assert len({len(line) for line in lines[1:4]}) <= 2, "columns are aligned"
    assert render_table(rows, ansi=True).startswith("\x1b[1mPOD")


def test_render_line_is_one_line_per_frame() -> None:
    line = render_line([pod_row("pod-a", "127.0.0.2", STATS)])
    assert line == "pod-a q=2 run=5 kv=38% lora=food-review-1,food-review-2* routed=30"
    loading = render_line([pod_row("pod-b", "-", {}, state="Loading 2s")])
    assert loading == "pod-b [Loading 2s] q=0 run=0 kv=0% lora=- routed=0"
    assert render_table([]).splitlines()[-1].startswith("0 pods")


def test_dashboard_plain_prints_only_changes_and_tty_redraws_in_place() -> None:
    stats = dict(STATS)
    plain = io.StringIO()
    board = Dashboard(lambda: [pod_row("pod-a", "127.0.0.2", stats)], out=plain, tty=False)
    board.draw()
    board.draw()
    stats["requests"] = 31
    board.draw()
    assert plain.getvalue().count("[epp dev] pod-a") == 2

    screen = io.StringIO()
    board = Dashboard(lambda: [pod_row("pod-a", "127.0.0.2", stats)], out=screen, tty=True, interval=0.5)
    board.draw()
    assert "\x1b[J" not in screen.getvalue()
    stats["requests"] = 32
    board.draw()
    second = screen.getvalue().split("\x1b[3F\x1b[J")  # header, one row, totals
    assert len(second) == 2 and " 2.0" in second[1], "1 request in 0.5 s"
    board.note("load done")
    assert screen.getvalue().endswith(second[1]) and "\x1b[3F\x1b[Jload done\n" in screen.getvalue()


# ---------------------------------------------------------------------------------- load


def test_workload_is_seeded_and_mixed() -> None:
    config = LoadConfig(model=MODEL, lora_models=("food-review",), objectives=("critical", "sheddable"), seed=3)
    first = [r for r, _ in zip(plan_requests(config), range(200), strict=False)]
    again = [r for r, _ in zip(plan_requests(config), range(200), strict=False)]
    assert first == again
    kinds = {r.kind for r in first}
    assert {"chat", "lora", "chat+stream", "chat+sheddable", "lora+critical"} <= kinds
    for r in first:
        body = json.loads(r.body)
        assert body["model"] == ("food-review" if r.kind.startswith("lora") else MODEL)
        assert body.get("stream", False) == r.stream == r.kind.endswith("+stream")
        assert config.min_tokens <= body["max_tokens"] <= config.max_tokens
        assert r.headers.get(OBJECTIVE) in (None, "critical", "sheddable")
    systems = {json.loads(r.body)["messages"][0]["content"] for r in first if r.kind.startswith("chat")}
    assert len(systems) == 3, "a few shared system prompts, so prefix affinity shows"


def test_load_config_is_validated() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        LoadConfig(model=MODEL, concurrency=0)
    with pytest.raises(ValueError, match="lora_fraction"):
        LoadConfig(model=MODEL, lora_fraction=1.5)


async def test_epp_dev_without_kubernetes_serves_the_pods_of_its_endpoints_file() -> None:
    returncode, out = await run_epp_dev("--no-kubernetes", "--pods", "2", "--load", "--duration", "2", timeout=45)
    assert returncode == 0, out
    assert re.search(r"^  endpoints file: \S+endpoints\.yaml \(no Kubernetes", out, re.M), out
    assert "kubeconfig:" not in out and "food-review" not in out  # no API server, so no rewrite objects either
    statuses = dict(re.findall(r"(\S+): (\d+)", re.search(r"by status: (.*)", out).group(1)))  # type: ignore[union-attr]
    assert int(statuses["200"]) > 0 and set(statuses) <= {"200", "429"}, out
    returncode, out = await run_epp_dev("--no-kubernetes", "--autoscale", "--load", timeout=20)
    assert returncode == 2 and "--no-kubernetes does not run" in out
