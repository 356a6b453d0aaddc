"""The real-engine tier: tests against real vLLM servers (``epp_vllm``), run by ``scripts/test`` after the main suite.

Every test here is marked ``real_engine`` (epp-sim's pytest plugin: the fixtures, a timeout that
covers the first install, the skip where the platform cannot run vLLM). One adapter name is used
on the second server only, so its ``vllm:lora_requests_info`` history never reaches the first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from epp_sim.realengine.servers import VllmFleet, write_lora_adapter

ADAPTER = "sql-lora"


def _order(item: pytest.Item) -> int:
    """Tests on the fleet's first topology, then the one that kills a server, then central mode, then P/D.

    A topology switch restarts both engines (minutes on two cores), and so would a killed one:
    in this order the fleet starts twice in all. The P/D test stops the fleet for engines of its own.
    """
    if item.path.name == "test_pd_sidecar_on_vllm.py":
        return 3
    topologies = [m.kwargs.get("kv_events") for m in item.iter_markers("real_engine")]
    if "central" in topologies:
        return 2
    return 1 if item.path.name == "test_unreachable_engine.py" else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    ours = [item for item in items if here in item.path.parents]
    for item in ours:
        if item.get_closest_marker("real_engine") is None:
            item.add_marker(pytest.mark.real_engine)
    if len(ours) == len(items):
        items.sort(key=_order)  # stable: file order within each group


@pytest.fixture
async def adapter_on_second(epp_vllm: VllmFleet, tmp_path: Path) -> AsyncIterator[str]:
    """A rank-8 adapter written now, loaded into the second server (unloaded after the test)."""
    server = epp_vllm.servers[1]
    path = await write_lora_adapter(epp_vllm.install, tmp_path / "adapter")
    await server.load_adapter(ADAPTER, path)
    try:
        yield ADAPTER
    finally:
        if server.running:
            await server.unload_adapter(ADAPTER)
