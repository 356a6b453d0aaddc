"""probabilistic-admitter: shed sheddable requests with a probability that rises steeply with the pool's saturation.

The llm-d router's ``requestcontrol/admitter/probabilisticadmitter`` (an admission plugin: it runs
after the data producers, before scheduling). Priority ≥ 0 is always admitted, and so is every
request when there is no candidate. For a sheddable request (priority < 0):
``saturation = mean over the candidates of max(waiting / queueDepthThreshold, kv / kvCacheUtilThreshold)``
and it is refused with probability ``min(saturation^power × k, 1)`` (defaults 5, 0.8, 5, 300: about
2% at saturation 0.15, every one past 0.34). A refusal is upstream's: 500, ``inference error:
Internal - request cannot be admitted: inference error: ResourceExhausted - probabilistic-admitter:
rejected, saturation=<s> prob=<p>``. Upstream's sample configuration neuters the
``utilization-detector`` (huge thresholds) so this plugin alone decides.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.admission import Denial
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest

__all__ = ["TYPE", "ProbabilisticAdmitter", "create"]

TYPE = "probabilistic-admitter"


class ProbabilisticAdmitter(NamedPlugin):
    __slots__ = ("_rng", "k", "kv_threshold", "power", "queue_threshold")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.ADMITTER})

    def __init__(
        self,
        name: str = TYPE,
        *,
        queue_threshold: int = 5,
        kv_threshold: float = 0.8,
        power: float = 5.0,
        k: float = 300.0,
        rng: random.Random,
    ) -> None:
        super().__init__(name)
        self.queue_threshold = queue_threshold
        self.kv_threshold = kv_threshold
        self.power = power
        self.k = k
        self._rng = rng

    def saturation(self, candidates: Sequence[EndpointState]) -> float:
        q, kv = self.queue_threshold, self.kv_threshold
        total = sum(max(c.metrics.waiting_queue / q, c.metrics.kv_cache_usage / kv) for c in candidates)
        return total / len(candidates)

    def admit(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> Denial | None:
        if request.priority >= 0 or not candidates:
            return None
        saturation = self.saturation(candidates)
        probability = min(saturation**self.power * self.k, 1.0)
        if self._rng.random() < probability:
            return Denial("ResourceExhausted", f"{TYPE}: rejected, saturation={saturation:.3f} prob={probability:.2f}")
        return None


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> ProbabilisticAdmitter:
    p = Params(TYPE, params)
    queue = p.integer("queueDepthThreshold", 5, minimum=1)
    kv = p.number("kvCacheUtilThreshold", 0.8, minimum=0.0, exclusive_minimum=True)
    power = p.number("power", 5.0, minimum=0.0, exclusive_minimum=True)
    k = p.number("k", 300.0, minimum=0.0, exclusive_minimum=True)
    p.done()
    return ProbabilisticAdmitter(
        name, queue_threshold=queue, kv_threshold=kv, power=power, k=k, rng=random.Random(context.seed)
    )
