"""Health details: a named part that can fail alone, NOT_SERVING under its own name while readiness stays."""

from __future__ import annotations

from epp.extproc import pb
from epp.extproc.health import LIVENESS, READINESS, DetailRelay, HealthState

SERVING = pb.HealthCheckResponse.SERVING
NOT_SERVING = pb.HealthCheckResponse.NOT_SERVING


async def test_a_detail_follows_its_part_and_readiness_and_nothing_else_follows_it() -> None:
    health = HealthState()
    health.set_detail("state-sync/ns/pool", True)
    assert health.status("state-sync/ns/pool") == NOT_SERVING  # not ready yet
    health.set_ready(True)
    assert health.status("state-sync/ns/pool") == SERVING
    health.set_detail("state-sync/ns/pool", False)
    assert [health.status(s) for s in ("state-sync/ns/pool", READINESS, "", LIVENESS)] == [
        NOT_SERVING,
        SERVING,
        SERVING,
        SERVING,
    ]
    listed = await health.List(pb.HealthListRequest(), None)
    assert listed.statuses["state-sync/ns/pool"].status == NOT_SERVING
    health.drain()
    health.set_detail("state-sync/ns/pool", True)
    assert health.status("state-sync/ns/pool") == NOT_SERVING  # draining: every name but liveness


async def test_details_told_before_the_server_exists_reach_it_once_bound() -> None:
    relay = DetailRelay()
    relay.set_detail("kv-index/ns/pool/p", True)
    relay.set_detail("kv-index/ns/pool/p", False)  # the last word counts
    health = HealthState()
    health.set_ready(True)
    relay.bind(health)
    assert health.status("kv-index/ns/pool/p") == NOT_SERVING
    relay.set_detail("kv-index/ns/pool/p", True)
    assert health.status("kv-index/ns/pool/p") == SERVING
