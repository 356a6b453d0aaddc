"""Health details: a named part that can fail alone, NOT_SERVING under its own name while readiness stays."""

from __future__ import annotations

from epp.extproc import pb
from epp.extproc.health import LIVENESS, READINESS, HealthState

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
