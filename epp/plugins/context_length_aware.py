"""context-length-aware: prefer the candidates whose declared context-length range fits the request.

The llm-d router's ``scheduling/scorer/contextlengthaware``, a scorer and (``enableFiltering``) a
filter. Each pod declares ``min-max`` tokens in a label (``label``, default
``llm-d.ai/context-length-range``, e.g. ``"0-2048"``). Scores: a pod without the label 0.5; an
unreadable range 0; in range, in (0.3, 1.0]: ``0.3 + 0.7 × (0.7 × 1/(1 + width/10000) + 0.3 ×
headroom/width)`` (1.0 for a zero-width range), so tighter ranges with more headroom win; out of
range, below 0.3: ``0.3 / (1 + distance/1000)`` to the nearer bound, so the closest pod wins. As a
filter it keeps the pods in range and those without the label (an unreadable range is dropped).

The context length is the request's token count: the ``token-producer``'s tokens (it declares
``TokenizedPrompt`` as a required input, as upstream, so a configuration without a
``token-producer`` gets one with upstream's tokenizer-free ``estimate`` backend: 4 prompt bytes a
pseudo-token), the client's own ids for a token prompt, else the body size at 4 bytes a token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.data import Dependencies
from epp.framework.data_keys import TOKENIZED_PROMPT, TokenizedPrompt
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.prompt import TokenPrompt
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState

__all__ = ["TYPE", "ContextLengthAware", "context_length", "create", "range_score"]

TYPE = "context-length-aware"
DEFAULT_LABEL = "llm-d.ai/context-length-range"
_BYTES_PER_TOKEN = 4
_MAX_FALLBACK = 0.3


def context_length(request: InferenceRequest) -> int:
    """The request's token count: produced tokens, the client's token ids, else body bytes / 4."""
    if request.token_ids is not None:
        return len(request.token_ids)
    prompt = request.prompt
    if isinstance(prompt, TokenPrompt) and all(isinstance(t, int) for t in prompt.token_ids):
        return len(prompt.token_ids)
    return request.size // _BYTES_PER_TOKEN


def _parse_range(text: str) -> tuple[int, int] | None:
    bounds = text.split("-")
    if len(bounds) != 2:
        return None
    try:
        low, high = int(bounds[0].strip()), int(bounds[1].strip())
    except ValueError:
        return None
    return (low, high) if low <= high else None


def range_score(length: int, low: int, high: int) -> float:
    """Upstream's ``calculateRangeScore``."""
    if low <= length <= high:
        width = high - low
        if width == 0:
            return 1.0
        raw = 0.7 * (1.0 / (1.0 + width / 10000.0)) + 0.3 * ((high - length) / width)
        return _MAX_FALLBACK + raw * (1.0 - _MAX_FALLBACK)
    distance = length - high if length > high else low - length
    return _MAX_FALLBACK / (1.0 + distance / 1000.0)


class ContextLengthAware(NamedPlugin):
    __slots__ = ("enable_filtering", "label")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER, PluginKind.FILTER})

    def __init__(self, name: str = TYPE, *, label: str = DEFAULT_LABEL, enable_filtering: bool = False) -> None:
        super().__init__(name)
        self.label = label
        self.enable_filtering = enable_filtering

    def consumes(self) -> Dependencies:
        return Dependencies(required={TOKENIZED_PROMPT: TokenizedPrompt})

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        if not self.enable_filtering:
            return list(candidates)
        length = context_length(request)
        kept: list[EndpointState] = []
        for c in candidates:
            text = c.endpoint.labels.get(self.label)
            if text is None:
                kept.append(c)
                continue
            bounds = _parse_range(text)
            if bounds is not None and bounds[0] <= length <= bounds[1]:
                kept.append(c)
        return kept

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        length = context_length(request)
        scores: list[float] = []
        for c in candidates:
            text = c.endpoint.labels.get(self.label)
            if text is None:
                scores.append(0.5)
                continue
            bounds = _parse_range(text)
            scores.append(0.0 if bounds is None else range_score(length, *bounds))
        return scores


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> ContextLengthAware:
    p = Params(TYPE, params)
    label = p.string("label", DEFAULT_LABEL)
    filtering = p.boolean("enableFiltering", False)
    p.done()
    return ContextLengthAware(name, label=label, enable_filtering=filtering)
