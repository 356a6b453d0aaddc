"""Building blocks of the sidecar tests: a sidecar from its real flags, over simulated prefill and decode engines.

Each part runs for real on loopback: the simulators are vLLM stand-ins on their own 127.0.0.x
address, the sidecar is ``epp sidecar`` on the test's event loop, started from the argv a pod
would give it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from epp.sidecar.server import Sidecar
from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.ports import consecutive_free_ports
from epp_sim.stack.sidecars import sidecar_for, sidecar_options

__all__ = ["FAST", "decode_pod", "sample", "sidecar_options", "url"]

FAST = SimConfig(time_scale=50.0, enable_prompt_tokens_details=True)
"""Fast simulators that report ``prompt_tokens_details.cached_tokens`` (vLLM's ``--enable-prompt-tokens-details``),
which the sidecar rewrites after a remote prefill."""


@asynccontextmanager
async def decode_pod(
    host: str, *flags: str, ranks: int = 1, config: SimConfig = FAST
) -> AsyncIterator[tuple[Sidecar, Sequence[ModelServer]]]:
    """A decode pod at ``host``: its engine ranks and the sidecar in front (plain HTTP unless ``flags`` say)."""
    engine_port = consecutive_free_ports([host], ranks)
    engines = [ModelServer(config, host=host, port=engine_port + r) for r in range(ranks)]
    for engine in engines:
        await engine.start()
    try:
        proxy_port = consecutive_free_ports([host], ranks)  # once the engines hold theirs
        async with sidecar_for(host, proxy_port, engine_port, ranks, flags) as sidecar:
            yield sidecar, engines
    finally:
        for engine in engines:
            await engine.stop()


def url(sidecar: Sidecar, path: str = "/v1/completions", *, rank: int = 0) -> str:
    scheme = "https" if sidecar.options.secure_proxy else "http"
    return f"{scheme}://{sidecar.options.bind_address}:{sidecar.ports[rank]}{path}"


def sample(sidecar: Sidecar, name: str, **labels: str) -> float:
    value = sidecar.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
