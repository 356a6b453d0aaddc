"""Sending the prefill leg to the prefill pod: retries, a time limit, and an outcome the connector acts on.

One POST of the prefill body to the prefiller, on the client's path. A 502, 503 or 504 answer, a
connection that cannot be made or is dropped, or (ours) no answer within ``--prefill-timeout`` is
retried on the same host up to ``--prefill-max-retries`` times, ``--prefill-retry-backoff`` apart,
as upstream retries 502/503/504 (its transport turns a refused connection into a 502). Any other
error answer is final. A 2xx answer must be a JSON object: it carries the ``kv_transfer_params``.

Every failed attempt is counted by reason, every retry, and each prefill's duration by outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from epp.sidecar.metrics import SidecarMetrics

__all__ = ["PrefillOutcome", "PrefillSender"]

log = logging.getLogger(__name__)

_RETRIED_STATUSES = frozenset({502, 503, 504})


@dataclass(frozen=True, slots=True)
class PrefillOutcome:
    """The prefill's JSON answer, or why there is none: the last error answer (``status`` 0 for no answer at all)."""

    answer: Mapping[str, Any] | None
    attempts: int
    status: int = 0
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.answer is not None

    @property
    def engine_failed(self) -> bool:
        """The prefill pod failed (no answer, a 5xx, an answer that is not one), not the request (4xx)."""
        return self.status == 0 or self.status >= 500 or self.reason == "invalid-response"


class PrefillSender:
    """Sends prefills with the sidecar's retry settings."""

    def __init__(self, *, retries: int, backoff: float, timeout: float, metrics: SidecarMetrics) -> None:
        self._retries = retries
        self._backoff = backoff
        self._timeout = timeout or None
        self._metrics = metrics

    async def send(
        self, session: aiohttp.ClientSession, url: str, body: bytes, headers: Mapping[str, str], *, json: bool = True
    ) -> PrefillOutcome:
        """The prefill's outcome; ``json`` False: any 2xx answer will do (its body is not read as JSON)."""
        metrics = self._metrics
        started = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            outcome, retryable = await self._attempt(session, url, body, headers, attempt, json)
            if outcome.ok:
                metrics.prefill_duration.labels("ok").observe(time.perf_counter() - started)
                return outcome
            metrics.prefill_failures.labels(outcome.reason).inc()
            if not retryable or attempt > self._retries:
                metrics.prefill_duration.labels("failed").observe(time.perf_counter() - started)
                return outcome
            metrics.prefill_retries.inc()
            log.info(
                "retrying prefill request",
                extra={"attempt": attempt, "target": url, "previous": outcome.status or outcome.reason},
            )
            await asyncio.sleep(self._backoff)

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        attempt: int,
        json: bool,
    ) -> tuple[PrefillOutcome, bool]:
        """One try, and whether its failure may be retried."""
        try:
            async with asyncio.timeout(self._timeout):
                async with session.post(url, data=body, headers=headers) as response:
                    status, data, answer_headers = response.status, await response.read(), dict(response.headers)
        except TimeoutError:
            return PrefillOutcome(None, attempt, reason="timeout"), True
        except (aiohttp.ClientError, OSError) as e:
            log.warning("prefill request failed", extra={"target": url, "error": str(e) or type(e).__name__})
            return PrefillOutcome(None, attempt, reason="connect"), True
        if not 200 <= status < 300:
            failed = PrefillOutcome(None, attempt, status=status, body=data, headers=answer_headers, reason="status")
            return failed, status in _RETRIED_STATUSES
        if not json:
            return PrefillOutcome({}, attempt, status=status), False
        try:
            answer = orjson.loads(data)
        except orjson.JSONDecodeError:
            answer = None
        if not isinstance(answer, dict):
            return PrefillOutcome(None, attempt, status=status, body=data, reason="invalid-response"), False
        return PrefillOutcome(answer, attempt, status=status), False
