"""What the pickers say about each model: requests waiting in flow control, and requests arriving.

Read from the pickers named with ``--epp-metrics-url`` (their ``/metrics``), summed over them, once
per cycle. Two uses:

- **Scale-from-zero** (WVA's scale-from-zero engine, ``internal/engines/scalefromzero``): a
  variant at zero replicas goes to 1 when
  ``inference_extension_flow_control_queue_size{target_model_name=<modelID>}`` is above 0. With the
  picker's ``flowControl`` gate on, a request for a pool without endpoints waits in that queue (up to
  ``noEndpointRequestTTL``) instead of failing, so the first request is what wakes the pool. WVA
  finds the picker through the InferencePool whose selector matches the workload's pods and polls
  every 100 ms; here the pickers are named by flag and read every cycle, so keep ``--interval``
  well below ``noEndpointRequestTTL``.
- **Model signals** for the V2 and throughput analyzers when there is no Prometheus: the queue
  (size and bytes) as demand not yet on any replica, and the rate of successful scheduling
  attempts (``inference_extension_scheduler_attempts_total{status="success"}``) as the arrival
  rate, from the counter's increase between reads.

A picker that cannot be read counts as holding nothing, and is logged. Both the GIE and the llm-d
series names are read (``--metrics-naming``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import aiohttp

from epp.autoscale.inputs import ModelSignals
from epp.clock import Clock
from epp.datalayer.promtext import Sample, parse

__all__ = ["QUEUE_SIZE", "PickerReader", "PickerView"]

log = logging.getLogger(__name__)

QUEUE_SIZE = "inference_extension_flow_control_queue_size"
_NAMES = {
    "size": (QUEUE_SIZE, "llm_d_epp_flow_control_queue_size"),
    "bytes": ("inference_extension_flow_control_queue_bytes", "llm_d_epp_flow_control_queue_bytes"),
    "attempts": ("inference_extension_scheduler_attempts_total", "llm_d_epp_scheduler_attempts_total"),
}


@dataclass(frozen=True, slots=True)
class PickerView:
    """One read of every picker, by target model."""

    signals: Mapping[str, ModelSignals]

    def queued(self, model: str) -> float:
        s = self.signals.get(model)
        return 0.0 if s is None else s.queue_size


def _by_model(samples: Sequence[Sample], *, only_success: bool = False) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in samples:
        if only_success and s.labels.get("status") != "success":
            continue
        model = s.labels.get("target_model_name") or s.labels.get("model_name") or ""
        out[model] = out.get(model, 0.0) + s.value
    return out


class PickerReader:
    """Queue size, bytes and arrival rate per target model, summed over the pickers at ``urls``."""

    def __init__(
        self, session: aiohttp.ClientSession, urls: Sequence[str], clock: Clock, *, timeout: float = 2.0
    ) -> None:
        self._session = session
        self.urls = tuple(urls)
        self._clock = clock
        self._timeout = timeout
        self._attempts: dict[str, tuple[float, float]] = {}  # url|model → (time, total)

    async def read(self) -> PickerView:
        now = self._clock.now()
        totals: dict[str, dict[str, float]] = {}
        for url, page in zip(self.urls, await asyncio.gather(*(self._read(u) for u in self.urls)), strict=True):
            if page is None:
                continue
            for kind, values in page.items():
                for model, value in values.items():
                    if kind == "attempts":
                        value = self._rate(f"{url}|{model}", now, value)
                    per_model = totals.setdefault(model, {})
                    per_model[kind] = per_model.get(kind, 0.0) + value
        return PickerView(
            {
                m: ModelSignals(
                    queue_size=v.get("size", 0.0), queue_bytes=v.get("bytes", 0.0), arrival_rate=v.get("attempts", 0.0)
                )
                for m, v in totals.items()
            }
        )

    def _rate(self, key: str, now: float, total: float) -> float:
        previous = self._attempts.get(key)
        self._attempts[key] = (now, total)
        if previous is None or now <= previous[0]:
            return 0.0
        increase = total - previous[1] if total >= previous[1] else total  # a picker restart resets it
        return increase / (now - previous[0])

    async def _read(self, url: str) -> dict[str, dict[str, float]] | None:
        try:
            async with asyncio.timeout(self._timeout), self._session.get(url) as resp:
                resp.raise_for_status()
                text = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning("cannot read the picker's queue", extra={"url": url, "error": str(e) or type(e).__name__})
            return None
        result = parse(text, [n for names in _NAMES.values() for n in names])
        out: dict[str, dict[str, float]] = {}
        for kind, (gie, llmd) in _NAMES.items():
            samples = result.samples.get(gie) or result.samples.get(llmd) or []
            out[kind] = _by_model(samples, only_success=kind == "attempts")
        return out
