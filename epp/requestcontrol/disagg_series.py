"""The series of disaggregation decisions: how many requests each handler sent through which stages.

Upstream's (llm-d router ``profilehandler/disagg/metrics.go``):
``llm_d_epp_disagg_decision_total{plugin_name, plugin_type, model_name, decision_type}``, counted
for every request a disaggregation handler scheduled (``decode-only``, ``prefill-decode``,
``encode-decode``, ``encode-prefill-decode``; the target model, ``unknown`` when empty), and
``llm_d_epp_pd_decision_total``, the deprecated ``pd-profile-handler``'s. Each has a deprecated
twin with the older prefix and two labels, ``llm_d_inference_scheduler_{disagg,pd}_decision_total
{model_name, decision_type}``, emitted beside it (the llm-d router's dual emission): under
``--metrics-naming`` it takes the place of a GIE name, so ``both`` (the default) emits both,
``llm-d`` the current name only, and ``gie`` neither (GIE has no such series, as for every
llm-d-only one). The families are declared when a pool first disaggregates a request, so a pool
without disaggregation shows none of them.
"""

from __future__ import annotations

from epp.framework.disaggregation import Decision
from epp.telemetry.families import CounterFamily, Names
from epp.telemetry.metrics import EppMetrics

__all__ = ["DisaggSeries"]

_LABELS = ("plugin_name", "plugin_type", "model_name", "decision_type")
_OLD_LABELS = ("model_name", "decision_type")


class DisaggSeries:
    """Declared once per registry (``EppMetrics.series(DisaggSeries)``)."""

    __slots__ = ("_families",)

    def __init__(self, metrics: EppMetrics) -> None:
        f = metrics.families
        llm_d = f.naming != "gie"
        self._families: dict[str, CounterFamily] = {
            "disagg": f.counter(
                Names(
                    "llm_d_inference_scheduler_disagg_decision_total" if llm_d else None,
                    "llm_d_epp_disagg_decision_total",
                    "Total number of disaggregation routing decisions made",
                    labels=_LABELS,
                    gie_labels=_OLD_LABELS,
                )
            ),
            "pd": f.counter(
                Names(
                    "llm_d_inference_scheduler_pd_decision_total" if llm_d else None,
                    "llm_d_epp_pd_decision_total",
                    "Total number of P/D disaggregation decisions made",
                    labels=_LABELS,
                    gie_labels=_OLD_LABELS,
                )
            ),
        }

    def count(self, decision: Decision, model: str) -> None:
        handler = decision.handler
        self._families[decision.metric].labels(
            handler.name, handler.type, model or "unknown", decision.decision_type
        ).inc()
