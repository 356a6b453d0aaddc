"""The sidecar's own series (``epp_sidecar_*``), served on ``--metrics-port``.

Upstream's sidecar exports no Prometheus series of its own (its timings are span attributes); these
say what an operator of P/D needs to see: how requests went (decoded only, prefilled remotely,
prefilled locally after a dead prefiller, sent to a data-parallel rank), how long prefills take,
how often they are retried or fail (by reason), and how often the SSRF allowlist refused a host.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from epp.telemetry.series import Counter, Histogram

__all__ = ["PREFILL_FAILURES", "ROUTES", "SidecarMetrics"]

ROUTES = ("decode-only", "prefill-decode", "local-prefill", "data-parallel", "prefill-error")
"""``route`` values: decoded without a prefiller; prefilled remotely then decoded; the prefiller failed
and the decode engine prefilled instead; forwarded to another rank; the prefill error went to the client."""

PREFILL_FAILURES = ("connect", "timeout", "status", "invalid-response")
"""``reason`` values of a failed prefill attempt."""

_PREFILL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class SidecarMetrics:
    """Every series of one sidecar process, on the registry it is given."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "epp_sidecar_requests_total",
            "Inference requests the sidecar handled, by path and by how they were served (route).",
            ("path", "route"),
            registry=r,
        )
        self.prefill_duration = Histogram(
            "epp_sidecar_prefill_duration_seconds",
            "Time from sending a remote prefill until its answer (retries included), by outcome (ok, failed).",
            ("outcome",),
            registry=r,
            buckets=_PREFILL_BUCKETS,
        )
        self.prefill_retries = Counter(
            "epp_sidecar_prefill_retries_total",
            "Remote prefills sent again after a 502, 503, 504, a refused connection or a timeout.",
            registry=r,
        )
        self.prefill_failures = Counter(
            "epp_sidecar_prefill_failures_total",
            "Failed remote prefill attempts (KV transfer not started), by reason: connect, timeout, status "
            "(an error answer), invalid-response.",
            ("reason",),
            registry=r,
        )
        self.local_prefills = Counter(
            "epp_sidecar_local_prefill_fallbacks_total",
            "Requests the decode engine prefilled itself because the prefiller still failed after the retries.",
            registry=r,
        )
        self.ssrf_denied = Counter(
            "epp_sidecar_ssrf_denied_total",
            "Hosts refused by SSRF protection (not a pod of the InferencePool), by stage (prefiller, encoder).",
            ("stage",),
            registry=r,
        )
        self.missing_kv_params = Counter(
            "epp_sidecar_missing_kv_transfer_params_total",
            "Prefill answers without kv_transfer_params (the decode engine is then given null).",
            registry=r,
        )
        self.decode_errors = Counter(
            "epp_sidecar_decode_errors_total",
            "Requests the local engine could not take: not listening (503) or another transport error (502).",
            ("status",),
            registry=r,
        )
