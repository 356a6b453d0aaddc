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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.real_engine)


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
