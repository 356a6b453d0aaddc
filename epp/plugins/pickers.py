"""Pickers: choose the target endpoint(s) from the scored candidates.

- ``max-score-picker``: highest total score; ties broken uniformly at random (upstream shuffles,
  then stable-sorts by score descending; for one endpoint we draw among the tied best directly,
  which is the same distribution without sorting).
- ``random-picker``: uniform, scores ignored.
- ``weighted-random-picker``: A-Res weighted sampling without replacement, key = U^(1/score);
  endpoints scoring <= 0 get key 0 (picked only to fill ``maxNumOfEndpoints``); if no score is
  positive it behaves as ``random-picker``.

All take ``maxNumOfEndpoints`` (default 1); more than one target is the fallback list Envoy
receives. Randomness comes from a ``random.Random`` seeded by ``PluginContext.seed``, so tests
and benchmarks replay exactly.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any, ClassVar

from epp.framework.params import Params
from epp.framework.plugin import PluginContext, PluginKind, TypedName
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, ProfileResult, ScoredEndpoint

__all__ = [
    "MAX_SCORE_TYPE",
    "RANDOM_TYPE",
    "WEIGHTED_RANDOM_TYPE",
    "MaxScorePicker",
    "RandomPicker",
    "WeightedRandomPicker",
    "create_max_score",
    "create_random",
    "create_weighted_random",
]

MAX_SCORE_TYPE = "max-score-picker"
RANDOM_TYPE = "random-picker"
WEIGHTED_RANDOM_TYPE = "weighted-random-picker"
DEFAULT_MAX_NUM_OF_ENDPOINTS = 1

_by_score = attrgetter("score")


class _BasePicker:
    __slots__ = ("_max", "_rng", "_typed_name")
    kinds: ClassVar[frozenset[PluginKind]] = frozenset({PluginKind.PICKER})

    def __init__(self, type_name: str, name: str, max_num_of_endpoints: int, rng: random.Random) -> None:
        if max_num_of_endpoints < 1:
            raise ValueError(f"maxNumOfEndpoints must be >= 1, got {max_num_of_endpoints}")
        self._typed_name = TypedName(type_name, name)
        self._max = max_num_of_endpoints
        self._rng = rng

    @property
    def typed_name(self) -> TypedName:
        return self._typed_name

    @property
    def max_num_of_endpoints(self) -> int:
        return self._max

    def _uniform(self, scored: Sequence[ScoredEndpoint]) -> ProfileResult:
        if not scored:
            return ProfileResult([])
        if self._max == 1:
            return ProfileResult([self._rng.choice(scored).state])
        return ProfileResult([s.state for s in self._rng.sample(scored, min(self._max, len(scored)))])


class MaxScorePicker(_BasePicker):
    """Highest score wins; equal scores are broken uniformly at random."""

    __slots__ = ()

    def __init__(
        self,
        name: str = MAX_SCORE_TYPE,
        *,
        max_num_of_endpoints: int = DEFAULT_MAX_NUM_OF_ENDPOINTS,
        rng: random.Random,
    ) -> None:
        super().__init__(MAX_SCORE_TYPE, name, max_num_of_endpoints, rng)

    def pick(self, cycle: CycleState, request: InferenceRequest, scored: Sequence[ScoredEndpoint]) -> ProfileResult:
        if not scored:
            return ProfileResult([])
        if self._max == 1:
            best = max(s.score for s in scored)
            tied = [s.state for s in scored if s.score == best]
            return ProfileResult([tied[0] if len(tied) == 1 else self._rng.choice(tied)])
        order = list(scored)
        self._rng.shuffle(order)
        order.sort(key=_by_score, reverse=True)  # stable: the shuffle decides among equal scores
        return ProfileResult([s.state for s in order[: self._max]])


class RandomPicker(_BasePicker):
    """Uniform random choice; scores are ignored."""

    __slots__ = ()

    def __init__(
        self, name: str = RANDOM_TYPE, *, max_num_of_endpoints: int = DEFAULT_MAX_NUM_OF_ENDPOINTS, rng: random.Random
    ) -> None:
        super().__init__(RANDOM_TYPE, name, max_num_of_endpoints, rng)

    def pick(self, cycle: CycleState, request: InferenceRequest, scored: Sequence[ScoredEndpoint]) -> ProfileResult:
        return self._uniform(scored)


class WeightedRandomPicker(_BasePicker):
    """Probability proportional to score (A-Res: key = U^(1/score), largest keys win)."""

    __slots__ = ()

    def __init__(
        self,
        name: str = WEIGHTED_RANDOM_TYPE,
        *,
        max_num_of_endpoints: int = DEFAULT_MAX_NUM_OF_ENDPOINTS,
        rng: random.Random,
    ) -> None:
        super().__init__(WEIGHTED_RANDOM_TYPE, name, max_num_of_endpoints, rng)

    def pick(self, cycle: CycleState, request: InferenceRequest, scored: Sequence[ScoredEndpoint]) -> ProfileResult:
        if not any(s.score > 0 for s in scored):
            return self._uniform(scored)
        rand = self._rng.random
        keyed: list[tuple[float, int]] = []
        for i, s in enumerate(scored):
            if s.score <= 0:
                keyed.append((0.0, i))
                continue
            u = rand() or 1e-10  # random() is in [0, 1); U = 0 would give key 0 for a live endpoint
            keyed.append((u ** (1.0 / s.score), i))
        keyed.sort(key=lambda k: k[0], reverse=True)
        return ProfileResult([scored[i].state for _, i in keyed[: self._max]])


def _max_num(type_name: str, parameters: Mapping[str, Any]) -> int:
    params = Params(type_name, parameters)
    value = params.integer("maxNumOfEndpoints", DEFAULT_MAX_NUM_OF_ENDPOINTS, minimum=1)
    params.done()
    return value


def create_max_score(name: str, parameters: Mapping[str, Any], context: PluginContext) -> MaxScorePicker:
    return MaxScorePicker(
        name, max_num_of_endpoints=_max_num(MAX_SCORE_TYPE, parameters), rng=random.Random(context.seed)
    )


def create_random(name: str, parameters: Mapping[str, Any], context: PluginContext) -> RandomPicker:
    return RandomPicker(name, max_num_of_endpoints=_max_num(RANDOM_TYPE, parameters), rng=random.Random(context.seed))


def create_weighted_random(name: str, parameters: Mapping[str, Any], context: PluginContext) -> WeightedRandomPicker:
    return WeightedRandomPicker(
        name, max_num_of_endpoints=_max_num(WEIGHTED_RANDOM_TYPE, parameters), rng=random.Random(context.seed)
    )
