"""Which candidates scheduling may see, by endpoint health: the healthy first, everyone if none is.

Upstream hands every Ready pod to the scheduler; a pod whose server died or froze keeps its last
(often best) metrics and attracts the pool's traffic until the kubelet notices, 10–30 s later.
Here the candidates pass through three tiers, and the first non-empty one is scheduled:

1. **in service**: health ``healthy`` and metrics fresh by ``--metrics-staleness-threshold``
   (``framework/staleness.py``; admission's own threshold is the saturation detector's);
2. **degraded**: routable but ``suspect`` or stale, or back from an ejection and not yet proven
   good: scored as if saturated, that is never preferred over an endpoint in service, so only
   when no endpoint is in service;
3. **everyone**: when no candidate is routable (all unreachable or ejected), every candidate
   again, counted in ``epp_endpoint_health_fail_open_total``: a request sent to a doubtful
   endpoint beats one refused by the picker.

In a pool with ``llm-d.ai/role`` labels, each role's pods are tiered on their own: decode pods
that are all ``suspect`` (their sidecar slow to pass a scrape on) stay candidates while the
prefill pods are in service, rather than leaving the decode stage with nobody and the request
refused. The order of the candidates is kept.

When every candidate is in service (the usual case) the candidates are returned as they came,
with no copy.
"""

from __future__ import annotations

from collections.abc import Sequence

from epp.framework.endpoint import EndpointState
from epp.framework.health import Health
from epp.framework.roles import ROLE_LABEL
from epp.framework.staleness import Staleness

__all__ = ["healthy_candidates"]

_HEALTHY = Health.HEALTHY


def healthy_candidates(
    candidates: Sequence[EndpointState], now: float, staleness: Staleness
) -> tuple[Sequence[EndpointState], bool]:
    """The tier to schedule and whether it is the fail-open one (no candidate routable)."""
    fresh_since = staleness.fresh_since(now)
    for s in candidates:  # the usual case, all in service, allocates nothing
        if s.health.state is not _HEALTHY or s.metrics.updated_at < fresh_since:
            break
    else:
        return candidates, False
    roles: dict[str | None, list[EndpointState]] = {}
    for s in candidates:
        roles.setdefault(s.endpoint.labels.get(ROLE_LABEL), []).append(s)
    if len(roles) == 1:
        return _tier(candidates, now, fresh_since)
    kept: set[int] = set()
    failed_open = False
    for group in roles.values():
        tier, failed = _tier(group, now, fresh_since)
        kept.update(id(s) for s in tier)
        failed_open = failed_open or failed
    return [s for s in candidates if id(s) in kept], failed_open


def _tier(candidates: Sequence[EndpointState], now: float, fresh_since: float) -> tuple[Sequence[EndpointState], bool]:
    in_service = [s for s in candidates if s.health.state is _HEALTHY and s.metrics.updated_at >= fresh_since]
    if in_service:
        return in_service, False
    routable = [s for s in candidates if s.health.routable(now)]
    if routable:
        return routable, False
    return candidates, bool(candidates)
