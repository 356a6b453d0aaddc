"""Scale-from-zero: wake a variant at zero replicas when the picker holds requests for its model.

WVA's scale-from-zero engine (``internal/engines/scalefromzero/engine.go``) scrapes the picker
of the variant's pool and sets the Deployment to 1 replica when
``inference_extension_flow_control_queue_size{target_model_name=<modelID>}`` is above 0. With
the picker's ``flowControl`` gate on, a request for a pool without endpoints waits in that queue
(up to ``noEndpointRequestTTL``) instead of failing, so the first request is what wakes the pool.

Here the pickers to read are named with ``--epp-metrics-url`` (WVA finds the picker through the
InferencePool whose selector matches the Deployment's pods; this autoscaler does not look pools
up), and the check runs on every autoscaler cycle (WVA polls every 100 ms), so set ``--interval``
well below ``noEndpointRequestTTL``. A picker that cannot be read counts as holding nothing, and
is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import aiohttp

from epp.datalayer.promtext import parse

__all__ = ["QUEUE_SIZE", "QueueReader"]

log = logging.getLogger(__name__)

QUEUE_SIZE = "inference_extension_flow_control_queue_size"
_LLM_D_QUEUE_SIZE = "llm_d_epp_flow_control_queue_size"  # the picker with --metrics-naming=llm-d


class QueueReader:
    """Requests queued per target model, summed over the pickers at ``urls`` (their ``/metrics``)."""

    def __init__(self, session: aiohttp.ClientSession, urls: Sequence[str], *, timeout: float = 2.0) -> None:
        self._session = session
        self.urls = tuple(urls)
        self._timeout = timeout

    async def queued(self) -> dict[str, float]:
        """``target_model_name`` → requests waiting, over every picker that answered."""
        totals: dict[str, float] = {}
        for per_picker in await asyncio.gather(*(self._read(url) for url in self.urls)):
            for model, value in per_picker.items():
                totals[model] = totals.get(model, 0.0) + value
        return totals

    async def _read(self, url: str) -> dict[str, float]:
        try:
            async with asyncio.timeout(self._timeout), self._session.get(url) as resp:
                resp.raise_for_status()
                text = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning("cannot read the picker's queue", extra={"url": url, "error": str(e) or type(e).__name__})
            return {}
        result = parse(text, (QUEUE_SIZE, _LLM_D_QUEUE_SIZE))
        samples = result.samples.get(QUEUE_SIZE) or result.samples.get(_LLM_D_QUEUE_SIZE) or []
        out: dict[str, float] = {}
        for sample in samples:
            model = sample.labels.get("target_model_name", "")
            out[model] = out.get(model, 0.0) + sample.value
        return out
