"""file-discovery: upstream's endpoints file (validation, limits, duplicates), read at start, watched and
reloaded; and the store it feeds (a pool of exactly the reported endpoints, kept across a resync)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from epp.clock import ManualClock
from epp.datastore.discovery_reconciler import DiscoveryReconciler
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework.discovery import DiscoveredEndpoint, DiscoveryError
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.labels import Selector
from epp.plugins import file_discovery
from epp.plugins.file_discovery import MAX_FILE_BYTES, FileDiscovery, parse_endpoints
from epp_sim.waits import wait_until

TWO = """\
endpoints:
- name: vllm-0
  address: "10.0.0.1"
  port: "8000"
  labels: {model: llama}
- name: vllm-1
  namespace: team-a
  address: 10.0.0.2
  port: 8001
"""


def _names(endpoints: Sequence[DiscoveredEndpoint]) -> list[str]:
    return [f"{e.namespace}/{e.name}@{e.address}:{e.port}" for e in endpoints]


def test_upstreams_format_with_its_defaults() -> None:
    endpoints, problems = parse_endpoints(TWO.encode(), "f")
    assert problems == []
    assert _names(endpoints) == ["default/vllm-0@10.0.0.1:8000", "team-a/vllm-1@10.0.0.2:8001"]
    assert endpoints[0].labels == {"model": "llama"}
    twice = TWO + '- {name: vllm-0, address: "10.0.0.9", port: "9000"}\n'
    assert _names(parse_endpoints(twice.encode(), "f")[0])[0] == "default/vllm-0@10.0.0.9:9000"  # the last wins
    assert parse_endpoints(b'{"endpoints": []}', "f") == ([], [])  # JSON is YAML


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ('{name: a, address: "not-an-ip", port: "80"}', "endpoint 'a': invalid IPv4 address 'not-an-ip'"),
        ('{name: a, address: "::1", port: "80"}', "endpoint 'a': invalid IPv4 address '::1'"),
        ('{name: a, address: "10.0.0.1", port: "99999"}', "endpoint 'a': invalid port '99999'"),
        ('{name: a, address: "10.0.0.1", port: "http"}', "endpoint 'a': invalid port 'http'"),
        ('{name: a, address: "10.0.0.1"}', "endpoint 'a': invalid port None"),
        ('{address: "10.0.0.1", port: "80"}', "endpoints[0].name: required"),
        (
            '{name: a, address: "10.0.0.1", port: "80", labels: {k: 1}}',
            "endpoint 'a': labels must map strings to strings, got {'k': 1}",
        ),
    ],
)
def test_an_invalid_entry_is_named_and_the_others_kept(entry: str, problem: str) -> None:
    text = f"endpoints:\n- {entry}\n- {{name: ok, address: '10.0.0.3', port: '80'}}\n"
    endpoints, problems = parse_endpoints(text.encode(), "f")
    assert problems == [problem] and _names(endpoints) == ["default/ok@10.0.0.3:80"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"x" * (MAX_FILE_BYTES + 1), "exceeds the 1 MiB limit"),
        (b"endpoints: [", "parsing f"),
        (b"- just a list", "expected a mapping with an 'endpoints' list"),
        (b"endpoints: 3", "expected a mapping with an 'endpoints' list"),
    ],
)
def test_a_file_that_cannot_be_read_is_a_discovery_error(data: bytes, message: str) -> None:
    with pytest.raises(DiscoveryError, match=message):
        parse_endpoints(data, "f")


def test_parameters_as_upstream() -> None:
    plugin = file_discovery.create("fd", {"path": "/etc/epp/endpoints.yaml", "watchFile": True}, PluginContext())
    assert (str(plugin.path), plugin.watch_file) == ("/etc/epp/endpoints.yaml", True)
    assert not file_discovery.create("fd", {"path": "/x"}, PluginContext()).watch_file
    with pytest.raises(PluginConfigError, match=r"file-discovery\.parameters\.path: required"):
        file_discovery.create("fd", {}, PluginContext())
    with pytest.raises(PluginConfigError, match="unknown"):
        file_discovery.create("fd", {"path": "/x", "interval": 1}, PluginContext())


async def test_start_fails_on_a_missing_file_or_any_invalid_entry(tmp_path: Path) -> None:
    clock = ManualClock()
    with pytest.raises(DiscoveryError, match="reading"):
        await FileDiscovery("fd", path=str(tmp_path / "absent.yaml"), watch_file=False, clock=clock).load()
    bad = tmp_path / "bad.yaml"
    bad.write_text(TWO + "- {name: broken, address: 'x', port: '1'}\n")
    with pytest.raises(DiscoveryError, match="initial load of .* failed: endpoint 'broken': invalid IPv4"):
        await FileDiscovery("fd", path=str(bad), watch_file=False, clock=clock).load()


async def test_the_store_holds_exactly_what_the_file_lists_as_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    path.write_text(TWO)
    clock = ManualClock()
    plugin = FileDiscovery("fd", path=str(path), watch_file=True, clock=clock)
    store = Datastore()
    reconciler = DiscoveryReconciler(plugin, store, pool_name="epp", namespace="bare-metal")
    await reconciler.start()
    try:
        assert reconciler.synced.is_set() and store.pool is not None and store.pool.name == "epp"
        assert [s.endpoint.key for s in store.endpoints()] == ["default/vllm-0", "team-a/vllm-1"]
        first = store.endpoints()[0]
        assert (first.endpoint.hostport, first.endpoint.metrics_port, first.endpoint.labels) == (
            "10.0.0.1:8000",
            8000,
            {"model": "llama"},
        )

        async def polled(change: str) -> None:
            path.write_text(change)
            await wait_until(lambda: clock.sleepers == 1)
            clock.advance(plugin.interval)
            await wait_until(lambda: clock.sleepers == 1 and plugin._digest != "")  # polled and waiting again

        await polled('endpoints:\n- {name: vllm-2, address: "10.0.0.4", port: "8000"}\n')
        await wait_until(lambda: [s.endpoint.key for s in store.endpoints()] == ["default/vllm-2"])
        await polled("endpoints: [")  # unreadable: the last good set stays
        await asyncio.sleep(0)
        assert [s.endpoint.key for s in store.endpoints()] == ["default/vllm-2"]
        await polled(TWO + "- {name: broken, address: 'x', port: '1'}\n")  # a reload skips a bad entry
        await wait_until(lambda: [s.endpoint.key for s in store.endpoints()] == ["default/vllm-0", "team-a/vllm-1"])
        # A resync (the pool set again) keeps the discovered endpoints: they have no pod to lose.
        store.set_pool(PoolSpec("epp", "bare-metal", Selector(), (1234,)), pods=[PodInfo("p", "bare-metal", "1.2.3.4")])
        assert [s.endpoint.key for s in store.endpoints()] == ["default/vllm-0", "team-a/vllm-1"]
    finally:
        await reconciler.stop()
