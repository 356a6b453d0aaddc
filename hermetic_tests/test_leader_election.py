"""Two pickers with --ha-enable-leader-election: one ready at a time, failover on a clean stop."""

from __future__ import annotations

import dataclasses
import random

import pytest
from pool_modes import ALL_MODES

from epp.runtime import Runtime
from epp_sim.kube_objects import PoolMode
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.waits import wait_until


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_only_the_leader_is_ready_and_a_follower_takes_over(
    epp_pool: PoolFactory, mode: PoolMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = await epp_pool(mode, pods=1)
    options = dataclasses.replace(env.runtime.options, leader_election=True)
    monkeypatch.setenv("POD_NAME", "epp-first")  # each replica's identity in the Lease, as in a Deployment
    async with Runtime(options, rng=random.Random(1), readiness_interval=0.02) as first:
        await wait_until(lambda: first.ready, timeout=10, message="first picker leads")
        monkeypatch.setenv("POD_NAME", "epp-second")
        second = Runtime(options, rng=random.Random(2), readiness_interval=0.02)
        await second.start()
        try:
            await wait_until(lambda: second.pools[0].synced, timeout=10, message="follower synced")
            assert not second.ready  # synced, serving streams, but not the leader
            assert second.pools[0].datastore.endpoints()  # followers keep their state warm
            await first.stop()  # releases the lease
            await wait_until(lambda: second.ready, timeout=10, message="follower took over")
        finally:
            await second.stop()
