"""``epp dev --pd``: the sample pool served disaggregated, end to end through Envoy, as a user runs it."""

from __future__ import annotations

import re

import pytest
from epp_dev_cli import run_epp_dev

from epp_sim.dev.command import pd_roles


def test_a_third_of_the_pods_prefill() -> None:
    assert pd_roles(2) == ("prefill", "decode")
    assert pd_roles(3) == ("prefill", "decode", "decode")
    assert pd_roles(7) == ("prefill", "prefill", "decode", "decode", "decode", "decode", "decode")
    with pytest.raises(ValueError, match="at least 2 pods"):
        pd_roles(1)


async def test_epp_dev_pd_prefills_on_the_prefill_pod() -> None:
    returncode, out = await run_epp_dev("--pd", "--load", "--duration", "3", "--time-scale", "5", timeout=60)
    assert returncode == 0, out
    assert "P/D:" in out and re.search(r"simulated pods \(127\.0\.0\.2:\d+ prefill, 127\.0\.0\.3:\d+ decode", out), out
    routed = dict(re.findall(r"(\S+ \(\w+\))=(\d+)", re.search(r"routed: (.*)", out).group(1)))  # type: ignore[union-attr]
    prefill = [int(n) for name, n in routed.items() if "(prefill)" in name]
    decode = [int(n) for name, n in routed.items() if "(decode)" in name]
    assert len(prefill) == 1 and len(decode) == 2, out
    assert prefill[0] > 0, f"the load's long system prompts are prefilled on the prefill pod: {out}"
    assert sum(decode) > prefill[0], out  # every request is decoded on a decode pod; only uncached ones prefilled
