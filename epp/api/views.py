"""The picker's state as ``epp.v1`` messages: endpoints, configurations and explanations.

Pure translation, no I/O: each function reads what the picker holds at that moment (one
datastore snapshot, one ``LoadedConfig``, one :class:`~epp.requestcontrol.explain.Explanation`)
and builds the message. An endpoint's health is its health state's name; whether its metrics are
stale is ``--metrics-staleness-threshold``'s :class:`~epp.framework.staleness.Staleness`, as for
the pool gauges.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import orjson
import yaml

from epp.api import pb
from epp.config.loader import LoadedConfig
from epp.framework.disaggregation import Decision
from epp.framework.endpoint import EndpointState
from epp.framework.staleness import Staleness
from epp.requestcontrol.admission import Admission
from epp.requestcontrol.explain import Explanation
from epp.scheduling.trace import ProfileTrace

__all__ = ["by_plugin_name", "config_message", "endpoint_message", "explanation_message"]

_ADMISSION = {
    Admission.ADMITTED: pb.Admission.ADMITTED,
    Admission.SHED: pb.Admission.SHED,
    Admission.NOT_CHECKED: pb.Admission.NOT_CHECKED,
}


def endpoint_message(state: EndpointState, now: float, staleness: Staleness) -> pb.Endpoint:
    """One endpoint as the scheduler sees it now: identity, last metrics, their age and the scrape
    interval achieved, health, in-flight load."""
    e, m = state.endpoint, state.metrics
    message = pb.Endpoint(
        key=e.key,
        pod_name=e.pod_name,
        address=e.hostport,
        rank=e.rank,
        metrics_port=e.metrics_port,
        engine=e.engine,
        labels=dict(e.labels),
        metrics=pb.EndpointMetrics(
            waiting_queue=m.waiting_queue,
            running=m.running,
            kv_cache_usage=m.kv_cache_usage,
            active_adapters=sorted(m.active_adapters),
            waiting_adapters=sorted(m.waiting_adapters),
            max_adapters=m.max_adapters,
            cache_block_size=m.cache_block_size,
            cache_num_blocks=m.cache_num_blocks,
            custom=dict(m.custom),
        ),
        health=state.health.state.value,
        in_flight_requests=state.in_flight_requests,
        in_flight_tokens=state.in_flight_tokens,
    )
    age = m.age(now)
    message.metrics_stale = staleness.is_stale(m, now)
    if age != float("inf"):
        message.metrics_age_seconds = max(age, 0.0)
    if m.scrape_interval:
        message.scrape_interval_seconds = m.scrape_interval
    return message


def by_plugin_name(sizes: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """A pool's prefix index sizes (``PoolRouting.prefix_index_sizes``) by plugin name: a plugin holding two
    indexes (llm-d's all-in-one ``precise-prefix-cache-scorer``) counts both."""
    named: dict[str, int] = {}
    for (name, _), size in sizes.items():
        named[name] = named.get(name, 0) + size
    return named


def config_message(namespace: str, name: str, config: LoadedConfig) -> pb.PoolConfig:
    """The effective configuration as YAML, with the SHA-256 of its canonical JSON."""
    data = config.config.model_dump(mode="json", by_alias=True, exclude_none=True)
    canonical = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    return pb.PoolConfig(
        namespace=namespace,
        name=name,
        yaml=yaml.safe_dump(data, sort_keys=False),
        sha256=hashlib.sha256(canonical).hexdigest(),
        feature_gates=sorted(config.feature_gates),
        notices=[f"{n.setting}: {n.detail}" for n in config.notices],
    )


def explanation_message(pool: str, explanation: Explanation) -> pb.ExplainResponse:
    """What the pipeline decided in its dry run, and every step's outcome."""
    request = explanation.request
    message = pb.ExplainResponse(
        pool=pool,
        model=request.model,
        target_model=request.target_model,
        objective=request.objective,
        priority=request.priority,
        primary_profile=explanation.scheduling.primary_profile,
        picked=[t.endpoint.hostport for t in explanation.picked],
        profiles=[_profile_message(p) for p in explanation.scheduling.profiles],
        destination=explanation.destination,
        upstream_headers=explanation.upstream_headers,
        plugin_failures=[
            pb.PluginFailure(plugin=str(f.plugin), extension_point=f.extension_point, reason=f.reason, detail=f.detail)
            for f in explanation.scheduling.failures
        ],
    )
    decision = explanation.disaggregation
    if decision is not None:
        message.disaggregation.CopyFrom(_disaggregation_message(decision))
    if explanation.admission is not None:
        message.admission.verdict = _ADMISSION[explanation.admission]
        message.admission.reason = explanation.admission_reason
    addresses = {s.endpoint.key: s.endpoint.hostport for s in explanation.candidates}
    for predictions in explanation.latency:
        message.latency.append(
            pb.LatencyPredictions(
                producer=predictions.producer,
                ttft_slo_ms=predictions.ttft_slo_ms,
                tpot_slo_ms=predictions.tpot_slo_ms,
                endpoints=[
                    pb.EndpointLatency(
                        key=key,
                        address=addresses.get(key, ""),
                        ttft_ms=info.ttft_ms,
                        tpot_ms=info.tpot_ms,
                        ttft_headroom_ms=info.ttft_headroom,
                        tpot_headroom_ms=info.tpot_headroom,
                        valid=info.valid,
                        dispatched=info.dispatched,
                    )
                    for key, info in predictions.by_endpoint.items()
                ],
            )
        )
    error = explanation.error
    if error is not None:
        message.failure.http_status = error.code.http_status
        message.failure.message = str(error)
    return message


def _disaggregation_message(decision: Decision) -> pb.Disaggregation:
    return pb.Disaggregation(
        handler=str(decision.handler),
        decision=decision.decision_type,
        stages=[
            pb.StageExplanation(
                stage=str(s.stage),
                profile=s.profile,
                ran=s.ran,
                reason=s.reason,
                decider=str(s.decider) if s.decider is not None else "",
                numbers=dict(s.verdict.numbers) if s.verdict is not None else {},
                targets=_keys(s.targets),
            )
            for s in decision.stages
        ],
    )


def _profile_message(trace: ProfileTrace) -> pb.ProfileExplanation:
    return pb.ProfileExplanation(
        name=trace.name,
        error=trace.error,
        picker=str(trace.picker) if trace.picker is not None else "",
        filters=[pb.FilterResult(plugin=str(f.plugin), kept=_keys(f.kept)) for f in trace.filters],
        scorers=[pb.ScorerInfo(plugin=str(s.plugin), weight=s.weight) for s in trace.scorers],
        endpoints=_endpoint_scores(trace),
        targets=_keys(trace.targets),
    )


def _endpoint_scores(trace: ProfileTrace) -> list[pb.EndpointScores]:
    """Each endpoint's raw and weighted score per scorer, and the total the picker compared."""
    rows: list[pb.EndpointScores] = []
    totals = trace.totals
    for i, state in enumerate(trace.endpoints):
        scores = [
            pb.Score(raw=float(step.raw[i]), weighted=step.weighted[i])
            for step in trace.scorers
            if i < len(step.weighted)  # a scorer that returned too few scores failed the profile
        ]
        total = totals[i] if i < len(totals) else sum(s.weighted for s in scores)
        rows.append(
            pb.EndpointScores(key=state.endpoint.key, address=state.endpoint.hostport, scores=scores, total=total)
        )
    return rows


def _keys(states: Sequence[EndpointState]) -> list[str]:
    return [s.endpoint.key for s in states]
