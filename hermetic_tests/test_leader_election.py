"""Two pickers with --ha-enable-leader-election: one ready at a time, failover on a clean stop."""

from __future__ import annotations

import dataclasses
import random

from harness import hermetic

from epp.runtime import Runtime
from epp_sim.waits import wait_until


async def test_only_the_leader_is_ready_and_a_follower_takes_over() -> None:
    async with hermetic("v1", pods=1) as env:
        first_options = dataclasses.replace(env.runtime.options, leader_election=True)
        async with Runtime(first_options, rng=random.Random(1), readiness_interval=0.02) as first:
            await wait_until(lambda: first.ready, timeout=10, message="first picker leads")
            second = Runtime(first_options, rng=random.Random(2), readiness_interval=0.02)
            await second.start()
            try:
                await wait_until(lambda: second.pools[0].synced, timeout=10, message="follower synced")
                assert not second.ready  # synced, serving streams, but not the leader
                assert second.pools[0].datastore.endpoints()  # followers keep their state warm
                await first.stop()  # releases the lease
                await wait_until(lambda: second.ready, timeout=10, message="follower took over")
            finally:
                await second.stop()
