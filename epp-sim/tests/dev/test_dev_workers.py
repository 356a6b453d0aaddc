"""``epp dev --workers 2``: the local stack with a picker of two serving processes, as a user runs it."""

from __future__ import annotations

import re

from epp_dev_cli import run_epp_dev


async def test_epp_dev_with_two_workers_serves_every_request() -> None:
    returncode, out = await run_epp_dev("--workers", "2", "--load", "--duration", "3", "--time-scale", "5", timeout=90)
    assert returncode == 0, out
    statuses = re.search(r"by status: (.*)", out)
    assert statuses is not None and re.fullmatch(r"200: \d+", statuses.group(1).strip()), out
