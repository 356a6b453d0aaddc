"""A pool of KV-event-publishing simulators behind a precise picker (token-producer with the tiny tokenizer).

The precise cases build the same thing: ``pods`` simulators on the first loopback addresses, each
announcing its KV blocks on one common port, and the picker's precise configuration dialling them.
"""

from __future__ import annotations

from pathlib import Path

from pool_modes import served

from epp_sim.kube_objects import PoolMode
from epp_sim.ports import common_free_port
from epp_sim.precise_prefix import MODEL, SERVING_LABELS, kv_events_sim_config, precise_picker_config
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool

__all__ = ["precise_pool"]


async def precise_pool(
    epp_pool: PoolFactory, mode: PoolMode, tokenizer: Path, work: Path, *, pods: int, num_blocks: int
) -> HermeticPool:
    """The pool, its picker loaded with the precise configuration (written into ``work``)."""
    hosts = [f"127.0.0.{2 + i}" for i in range(pods)]  # the addresses epp_pool gives a test's first pods
    events_port = common_free_port(hosts)
    config = work / "precise.yaml"
    config.write_text(precise_picker_config(tokenizer, events_port))
    pool = await epp_pool(
        mode,
        pods=pods,
        sim_config=[kv_events_sim_config(tokenizer, host, events_port, num_blocks=num_blocks) for host in hosts],
        labels=SERVING_LABELS,
        objects=served(mode, MODEL),
        picker_args=["--config-file", str(config)],
    )
    assert [s.host for s in pool.servers] == hosts
    return pool
