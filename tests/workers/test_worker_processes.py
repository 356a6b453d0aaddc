"""``epp serve --workers 2`` as a container runs it: the child serves beside the parent and ends with it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from serve_process import run_serve, serve_process

from epp_sim.bench.procstat import child_pids
from epp_sim.kube_objects import inference_pool
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.manifests import CRDS_DIR
from epp_sim.waits import wait_until


def _serving_children(pid: int) -> list[int]:
    """The ``epp.workers.child`` processes of ``pid`` (its scrape worker is a child too)."""
    found = []
    for child in child_pids(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"epp.workers.child" in cmdline:
            found.append(child)
    return found


async def _with_pool(cluster: FakeCluster) -> None:
    await cluster.apply_manifests(CRDS_DIR)
    await cluster.apply(inference_pool("v1", "p", {"app": "m"}, 8000))


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


async def test_the_child_stops_with_a_sigterm_to_the_parent(epp_cluster: FakeCluster) -> None:
    await _with_pool(epp_cluster)
    async with serve_process("--pool-name=p", f"--kubeconfig={epp_cluster.kubeconfig}", "--workers=2") as serve:
        await serve.wait_serving()
        children = _serving_children(serve.proc.pid)
        assert len(children) == 1
    assert serve.proc.returncode == 0  # serve_process sent SIGTERM
    await wait_until(lambda: _gone(children[0]), timeout=10, message="the child ended with its parent")
    assert any("serving workers started" in line for line in serve.stderr)
    # The pod's one log: a child's lines name it.
    assert any("ext_proc serving" in line and "worker=1" in line for line in serve.stderr)


async def test_a_child_whose_parent_dies_stops(epp_cluster: FakeCluster) -> None:
    await _with_pool(epp_cluster)
    with pytest.raises(AssertionError):  # serve_process fails a parent that did not exit 0: killed here on purpose
        async with serve_process("--pool-name=p", f"--kubeconfig={epp_cluster.kubeconfig}", "--workers=2") as serve:
            await serve.wait_serving()
            (child,) = _serving_children(serve.proc.pid)
            os.kill(serve.proc.pid, signal.SIGKILL)
            await wait_until(lambda: _gone(child), timeout=20, message="the orphaned child stopped (its stdin ended)")
    assert serve.proc.returncode == -signal.SIGKILL


async def test_a_central_kv_events_socket_is_refused_with_several_workers(
    epp_cluster: FakeCluster, tmp_path: Path
) -> None:
    config = tmp_path / "central.yaml"
    config.write_text(
        """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: precise-prefix-cache-producer
  parameters: {kvEventsConfig: {zmqEndpoint: "tcp://127.0.0.1:5557", discoverPods: false}}
- type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: prefix-cache-scorer}, {pluginRef: max-score-picker}]
"""
    )
    await _with_pool(epp_cluster)
    code, lines = await run_serve(
        "--pool-name=p", f"--kubeconfig={epp_cluster.kubeconfig}", "--workers=2", f"--config-file={config}"
    )
    assert code == 1
    text = "\n".join(lines)
    assert "kvEventsConfig.zmqEndpoint: 'tcp://127.0.0.1:5557' is bound by one process" in text, text[-3000:]
    assert "epp serve --workers 2 runs that many" in text
