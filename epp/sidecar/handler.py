"""One request through the decode pod's sidecar: remote prefill first when the picker named a prefill pod.

For ``POST`` on ``/v1/chat/completions``, ``/v1/completions``, ``/v1/messages``, ``/v1/responses``
and ``/inference/v1/generate`` (upstream ``proxy.go``, ``chat_completions.go``):

1. ``x-prefiller-host-port`` (every value, a comma list tolerated; the first, or a random one with
   ``--enable-prefiller-sampling``) is removed from the request. A host SSRF protection refuses
   is a 403. ``x-encoder-hosts-ports`` and ``x-kv-cache-source-host-port`` are removed too: the
   encode stage and P2P pulls are not built here, so such a request is served without them;
2. with a prefill host, the connector runs: ``nixlv2`` sends the prefill leg and then the decode
   leg with the prefill's ``kv_transfer_params`` to the local engine, streaming its answer back
   with the prefill's cached-token count; ``shared-storage`` as ``connectors.py`` says. Both legs
   carry one new ``x-request-id``. A body that is not a JSON object is a 400 in vLLM's shape;
3. without one, ``x-data-parallel-host-port`` (only on the main listener) sends the request to that
   rank's engine (an unknown rank is a 400);
4. otherwise the request goes to the local engine as it is.

A prefill that still fails after the retries (no answer, a 5xx, an answer that is not one) is,
unlike upstream, not the client's problem: the decode engine prefills the request itself (the
client's body, no ``kv_transfer_params``), counted in ``epp_sidecar_local_prefill_fallbacks_total``
and logged. ``--local-prefill-fallback=false`` restores upstream's behaviour (the prefill's error
answer goes to the client), which a 4xx answer always does: the request itself was refused.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from epp.framework import headers as wire
from epp.sidecar.allowlist import Allowlist
from epp.sidecar.connectors import (
    CACHE_THRESHOLD,
    Api,
    nixl_decode,
    nixl_prefill,
    shared_storage_decode,
    shared_storage_prefill,
)
from epp.sidecar.metrics import SidecarMetrics
from epp.sidecar.options import NIXLV2, SidecarOptions
from epp.sidecar.prefill import PrefillOutcome, PrefillSender
from epp.sidecar.upstreams import Upstreams, error_response, forwarded_headers, open_stream, relay
from epp.sidecar.usage_rewrite import cached_tokens_of

__all__ = ["Disaggregator"]

log = logging.getLogger(__name__)

_STRIPPED = (
    wire.PREFILLER_HOST_PORT,
    wire.ENCODER_HOSTS_PORTS,
    wire.KV_CACHE_SOURCE_HOST_PORT,
    "accept-encoding",  # the answer's usage may be rewritten: it must come uncompressed
)
_PEEK_LIMIT = 1 << 20


class Disaggregator:
    """The inference handler of one listener (the main port, or a data-parallel rank's)."""

    def __init__(
        self,
        options: SidecarOptions,
        *,
        upstreams: Upstreams,
        allowlist: Allowlist,
        metrics: SidecarMetrics,
        prefill: PrefillSender,
        decoder: str,
        ranks: Mapping[str, str] | None,
        rng: random.Random,
    ) -> None:
        self._options = options
        self._upstreams = upstreams
        self._allowlist = allowlist
        self._metrics = metrics
        self._prefill = prefill
        self._decoder = decoder
        self._ranks = ranks
        self._rng = rng

    async def handle(self, request: web.Request, api: Api) -> web.StreamResponse:
        prefill_host = self._prefill_host(request)
        if prefill_host and not self._allowlist.allows(prefill_host):
            self._metrics.ssrf_denied.labels("prefiller").inc()
            log.error(
                "SSRF protection: prefill target not in allowlist",
                extra={"target": prefill_host, "client": request.remote, "path": request.path},
            )
            return web.Response(status=403, text="Forbidden: prefill target not allowed by SSRF protection")
        self._note_unbuilt_stages(request)
        headers = forwarded_headers(request.headers, _STRIPPED)
        if prefill_host:
            return await self._disaggregated(request, api, prefill_host, headers)
        rank = request.headers.get(wire.DATA_PARALLEL_HOST_PORT) if self._ranks is not None else None
        if rank:
            decoder = self._ranks.get(rank) if self._ranks is not None else None
            if decoder is None:
                log.warning("unknown data-parallel rank", extra={"rank": rank, "known": sorted(self._ranks or ())})
                return web.Response(status=400, text=f"unknown {wire.DATA_PARALLEL_HOST_PORT} {rank!r}")
            return await self._to_engine(request, headers, request.content, route="data-parallel", decoder=decoder)
        return await self._to_engine(request, headers, request.content, route="decode-only")

    # -- the headers ----------------------------------------------------------------------------

    def _prefill_host(self, request: web.Request) -> str:
        values = request.headers.getall(wire.PREFILLER_HOST_PORT, [])
        if len(values) == 1:
            values = values[0].split(",")
        hosts = [v.strip() for v in values if v.strip()]
        if not hosts:
            return ""
        return self._rng.choice(hosts) if self._options.prefiller_sampling else hosts[0]

    def _note_unbuilt_stages(self, request: web.Request) -> None:
        for name, stage in ((wire.ENCODER_HOSTS_PORTS, "encoder"), (wire.KV_CACHE_SOURCE_HOST_PORT, "kv-cache source")):
            if request.headers.get(name):
                log.debug("ignoring %s: not built in epp sidecar", stage, extra={"header": name})

    # -- the legs -------------------------------------------------------------------------------

    async def _to_engine(
        self,
        request: web.Request,
        headers: Mapping[str, str],
        data: object,
        *,
        route: str,
        decoder: str = "",
        cached_tokens: int | None = None,
    ) -> web.StreamResponse:
        """The request (``data`` as its body) to the local engine; its answer streamed back."""
        self._metrics.requests.labels(request.path, route).inc()
        url = f"{decoder or self._decoder}{request.path_qs}"
        answer = await open_stream(self._upstreams.session("decoder"), request.method, url, headers=headers, data=data)
        if isinstance(answer, web.Response):
            self._metrics.decode_errors.labels(str(answer.status)).inc()
            return answer
        return await relay(request, answer, cached_tokens=cached_tokens)

    async def _disaggregated(
        self, request: web.Request, api: Api, host: str, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            return error_response(400, f"invalid JSON: {e}", "BadRequestError")
        if not isinstance(body, dict):
            return error_response(400, "invalid JSON: the body must be an object", "BadRequestError")
        legs = {**headers, wire.REQUEST_ID: str(uuid.uuid4())}
        if self._options.kv_connector == NIXLV2:
            return await self._nixl(request, api, host, body, legs)
        return await self._shared_storage(request, host, body, raw, legs)

    async def _nixl(
        self, request: web.Request, api: Api, host: str, body: dict[str, Any], legs: Mapping[str, str]
    ) -> web.StreamResponse:
        outcome = await self._send_prefill(request, host, nixl_prefill(body, api), legs, json=True)
        if not outcome.ok:
            return await self._prefill_failed(request, host, outcome, legs, orjson.dumps(body))
        answer = outcome.answer or {}
        kv_params = answer.get("kv_transfer_params")
        if kv_params is None:
            self._metrics.missing_kv_params.inc()
            log.warning("missing 'kv_transfer_params' field in prefiller response", extra={"prefiller": host})
        decode = orjson.dumps(nixl_decode(body, kv_params))
        return await self._to_engine(
            request, legs, decode, route="prefill-decode", cached_tokens=cached_tokens_of(answer)
        )

    async def _shared_storage(
        self, request: web.Request, host: str, body: dict[str, Any], raw: bytes, legs: Mapping[str, str]
    ) -> web.StreamResponse:
        if "cache_hit_threshold" in body:
            tried = await self._decode_if_cached(request, raw, legs)
            if tried is not None:
                return tried
        outcome = await self._send_prefill(request, host, shared_storage_prefill(body), legs, json=False)
        decode = orjson.dumps(shared_storage_decode(body))
        if not outcome.ok:
            return await self._prefill_failed(request, host, outcome, legs, decode)
        return await self._to_engine(request, legs, decode, route="prefill-decode")

    async def _decode_if_cached(
        self, request: web.Request, raw: bytes, legs: Mapping[str, str]
    ) -> web.StreamResponse | None:
        """Try the decode engine alone; None when it answered ``cache_threshold`` (it needs the prefill)."""
        url = f"{self._decoder}{request.path_qs}"
        answer = await open_stream(self._upstreams.session("decoder"), request.method, url, headers=legs, data=raw)
        if isinstance(answer, web.Response):
            self._metrics.decode_errors.labels(str(answer.status)).inc()
            return answer
        head = b""
        if 200 <= answer.status < 300:
            sse = "text/event-stream" in answer.headers.get("Content-Type", "")
            while not answer.content.at_eof() and len(head) < _PEEK_LIMIT and not _first_event_read(head, sse):
                head += await answer.content.readany()
            if _finished_for_cache(head, sse):
                answer.close()
                return None
        self._metrics.requests.labels(request.path, "decode-only").inc()
        return await relay(request, answer, head=head)

    async def _send_prefill(
        self, request: web.Request, host: str, body: dict[str, Any], legs: Mapping[str, str], *, json: bool
    ) -> PrefillOutcome:
        url = self._upstreams.url("prefiller", host, request.path_qs)
        return await self._prefill.send(self._upstreams.session("prefiller"), url, orjson.dumps(body), legs, json=json)

    async def _prefill_failed(
        self, request: web.Request, host: str, outcome: PrefillOutcome, legs: Mapping[str, str], local_body: bytes
    ) -> web.StreamResponse:
        """The prefiller failed: prefill on the decode engine, or (4xx, fallback off) give the client its answer."""
        failure = f"{outcome.status} answer" if outcome.status else f"{outcome.reason}"
        if outcome.engine_failed and self._options.local_prefill_fallback:
            self._metrics.local_prefills.inc()
            log.warning(
                "prefill failed after %d attempt(s) (%s); the decode engine prefills the request itself",
                outcome.attempts,
                failure,
                extra={"prefiller": host, "path": request.path},
            )
            return await self._to_engine(request, legs, local_body, route="local-prefill")
        self._metrics.requests.labels(request.path, "prefill-error").inc()
        log.error("prefill request failed", extra={"prefiller": host, "failure": failure, "body": outcome.body[:512]})
        if not outcome.status:
            return error_response(502, f"prefill request to {host} failed: {outcome.reason}", "BadGateway")
        response = web.Response(status=outcome.status, body=outcome.body)
        response.headers.update(forwarded_headers(outcome.headers))
        return response


def _first_event_read(head: bytes, sse: bool) -> bool:
    """Whether enough of the answer is in to see its first choice's finish reason."""
    return sse and b'"finish_reason"' in head and b"\n\n" in head.split(b'"finish_reason"', 1)[1]


def _finished_for_cache(head: bytes, sse: bool) -> bool:
    """The (first) choice finished with ``cache_threshold``: the engine held too little of the prompt."""
    documents: list[bytes] = [head]
    if sse:
        documents = [line[5:].strip() for line in head.split(b"\n") if line.startswith(b"data:")]
    for document in documents:
        try:
            answer = orjson.loads(document)
        except orjson.JSONDecodeError:
            continue
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            reason = choices[0].get("finish_reason")
            if reason is not None:
                return bool(reason == CACHE_THRESHOLD)
    return False
