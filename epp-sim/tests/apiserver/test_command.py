"""``epp sim apiserver``: flags, and the process serving (with its kubeconfig) until SIGTERM.

The processes are the real command (``python -m epp sim apiserver``) driven by the real kubectl:
with ``--workloads`` a Deployment's pods load, turn Ready and answer on their podIP; with
``--data-dir`` a stopped and restarted server still has every object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from epp_sim.apiserver.command import add_parser, run
from epp_sim.apiserver.persistence import FILE_NAME
from epp_sim.ports import common_free_port
from epp_sim.stack.kubectl import Kubectl
from epp_sim.waits import wait_until


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="epp sim")
    add_parser(parser.add_subparsers(dest="sim_command"))
    return parser.parse_args(["apiserver", *argv])


def test_flags_and_bad_values() -> None:
    args = _parse("--port", "0", "--kubeconfig-out", "/tmp/k", "--pod-grace-seconds", "2")
    assert (args.host, args.port, args.kubeconfig_out, args.pod_grace_seconds) == ("127.0.0.1", 0, Path("/tmp/k"), 2.0)
    assert args.func is run
    assert run(_parse("--port", "70000")) == 2
    assert run(_parse("--bookmark-interval", "0")) == 2


@asynccontextmanager
async def _apiserver(work: Path, *flags: str) -> AsyncIterator[tuple[str, Kubectl]]:
    """``python -m epp sim apiserver`` until the block ends, then SIGTERM: it must exit 0."""
    await asyncio.to_thread(work.mkdir, parents=True)
    kubeconfig = work / "kubeconfig"
    with (work / "stderr").open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "epp", "sim", "apiserver", "--port", "0", "--kubeconfig-out", str(kubeconfig),
            *flags, stdout=asyncio.subprocess.PIPE, stderr=stderr, start_new_session=True,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)  # printed once the kubeconfig is written
        assert line.startswith(b"fake API server on "), (work / "stderr").read_text()
        yield line.decode().split()[-1], Kubectl(kubeconfig, work)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0, (work / "stderr").read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_process_writes_kubeconfig_and_serves_until_sigterm(tmp_path: Path) -> None:
    async with _apiserver(tmp_path / "server", "--host", "127.0.0.4") as (url, kubectl):
        config = yaml.safe_load(kubectl.kubeconfig.read_text())
        assert url.startswith("http://127.0.0.4:") and config["clusters"][0]["cluster"]["server"] == url
        assert config["current-context"] == "epp-sim"
        async with aiohttp.ClientSession() as http, http.get(f"{url}/api/v1/namespaces/default") as resp:
            assert (await resp.json())["status"]["phase"] == "Active"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-load-delay", "1"], "--model-load-delay needs --workloads"),
        (["--simulate-model-servers"], "--simulate-model-servers needs --workloads"),
        (["--first-pod-ip", "127.0.0.9"], "--first-pod-ip needs --workloads"),
        (["--workloads", "--time-scale", "2"], "--time-scale needs --simulate-model-servers"),
        (["--workloads", "--model-load-delay", "-1"], "--model-load-delay must be >= 0 seconds, got -1.0"),
        (["--workloads", "--model-load-delay", "nan"], "--model-load-delay must be >= 0 seconds, got nan"),
        (["--workloads", "--simulate-model-servers", "--time-scale", "0"], "--time-scale must be > 0, got 0.0"),
        (["--workloads", "--first-pod-ip", "127.0.0"], "--first-pod-ip must be an IPv4 address, got '127.0.0'"),
        (["--workloads", "--first-pod-ip", "127.0.0.255"], "--first-pod-ip must end in .1 to .254, got 127.0.0.255"),
        (
            ["--workloads", "--simulate-model-servers", "--first-pod-ip", "10.0.0.5"],
            "--first-pod-ip must be a loopback address (127.x.x.x) for --simulate-model-servers, got 10.0.0.5",
        ),
        (["--history-limit", "-1"], "--history-limit must be >= 0, got -1"),
    ],
)
def test_bad_flags_exit_2_with_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(_parse(*argv)) == 2
    assert capsys.readouterr().err == message + "\n"


def test_an_unreadable_data_dir_exits_1_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / FILE_NAME).write_text('{"formatVersion": 1, "resourceVersion": 4, "objects": [')
    assert run(_parse("--data-dir", str(tmp_path))) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"cannot restore the API server's state from {tmp_path / FILE_NAME}: ")


def _manifest(path: Path, *docs: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def _llm_deployment(port: int, replicas: int = 2) -> dict[str, Any]:
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai",
        "args": ["--model", "qwen"],
        "ports": [{"containerPort": port}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "llm"}},
            "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {"containers": [container]}},
        },
    }


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or ())


async def _json(kubectl: Kubectl, *args: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((await kubectl.run("get", *args, "-o", "json")).stdout)
    return doc


async def test_workloads_pods_load_then_serve_a_simulator_on_their_pod_ip(tmp_path: Path) -> None:
    port = common_free_port(["127.0.0.170", "127.0.0.171"])
    flags = ("--workloads", "--model-load-delay", "0.3", "--simulate-model-servers", "--time-scale", "5")
    flags += ("--first-pod-ip", "127.0.0.170")
    async with _apiserver(tmp_path / "server", *flags) as (url, kubectl), aiohttp.ClientSession() as http:
        pods = f"{url}/api/v1/namespaces/default/pods?watch=true"
        async with http.get(pods) as watch:  # every state each pod goes through, none missed
            await kubectl.run("apply", "-f", _manifest(tmp_path / "llm.yaml", _llm_deployment(port)))
            loading: set[str] = set()
            ready: dict[str, str] = {}
            async with asyncio.timeout(10):
                while len(ready) < 2:
                    pod = json.loads(await watch.content.readline())["object"]
                    name = pod["metadata"]["name"]
                    if not _ready(pod):
                        assert "podIP" not in pod["status"] and name not in ready
                        loading.add(name)
                    elif name not in ready:
                        assert name in loading and pod["status"]["phase"] == "Running"
                        ready[name] = pod["status"]["podIP"]
        assert sorted(ready.values()) == ["127.0.0.170", "127.0.0.171"]

        async def stable() -> bool:
            status = (await _json(kubectl, "deployment", "llm")).get("status") or {}
            return (status.get("replicas"), status.get("readyReplicas"), status.get("availableReplicas")) == (2, 2, 2)

        await wait_until(stable, timeout=10, message="Deployment llm reports 2 ready replicas")
        [rs] = (await _json(kubectl, "replicasets"))["items"]
        assert (rs["status"]["replicas"], rs["status"]["readyReplicas"]) == (2, 2)
        for ip in ready.values():
            async with http.get(f"http://{ip}:{port}/metrics") as resp:
                assert resp.status == 200
                assert 'vllm:num_requests_running{engine="0",model_name="qwen"}' in await resp.text()


async def test_data_dir_keeps_objects_and_resource_versions_across_a_process_restart(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    objects = _manifest(
        tmp_path / "objects.yaml",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v"}},
        _llm_deployment(8000, replicas=1),
    )
    async with _apiserver(tmp_path / "first", "--data-dir", data) as (_, kubectl):
        await kubectl.run("apply", "-f", objects)
        await kubectl.run("scale", "deployment", "llm", "--replicas", "3")  # generation 2
        before = (await _json(kubectl, "configmaps,deployments"))["items"]
    old_rv = before[0]["metadata"]["resourceVersion"]  # the ConfigMap's: older than the scale
    assert before[1]["metadata"]["generation"] == 2

    async with _apiserver(tmp_path / "second", "--data-dir", data) as (url, kubectl):
        assert (await _json(kubectl, "configmaps,deployments"))["items"] == before
        async with aiohttp.ClientSession() as http:
            watch = f"{url}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={old_rv}"
            async with http.get(watch) as resp:
                event = json.loads(await resp.content.readline())
        assert (event["type"], event["object"]["code"]) == ("ERROR", 410)
        await kubectl.run("label", "configmap", "cm", "after=restart")
        cm = await _json(kubectl, "configmap", "cm")
        assert cm["metadata"]["uid"] == before[0]["metadata"]["uid"]
        assert int(cm["metadata"]["resourceVersion"]) > max(int(o["metadata"]["resourceVersion"]) for o in before)
