"""The deciders of disaggregated serving: whether a request gets a remote prefill (or an encode stage).

A disaggregation handler names them (``deciders.prefill``, ``deciders.encode``) and asks once per
request, after the decode profile picked its pod (llm-d router ``profilehandler/disagg``). They
serve no extension point of their own.

- ``prefix-based-pd-decider`` (``nonCachedTokens``, default 0 = never; ``promptTokens``, default
  0 = no minimum): prefill remotely when the prompt has at least ``promptTokens`` tokens and the
  part the decode pod does not hold yet, ``prompt − cached``, is at least ``nonCachedTokens``
  tokens. ``cached`` is the decode pick's leading prompt blocks times the block size, as the decode
  profile's ``prefix-cache-scorer`` found them (precise, from KV events, when it reads a
  ``precise-prefix-cache-producer``; else its approximate index). The prompt's length is its
  token count when a ``token-producer`` tokenized it, else its bytes / 4, rounded up: upstream's
  tokenizer-free ``estimate`` backend, which it creates when no producer is configured. When the
  decode profile scores no prefix, the decider keeps an approximate index of its own (blocks of
  16 tokens, or the engines' block size; 31,250 per pod), learning where each request's stages
  went, as upstream creates an ``approx-prefix-cache-producer`` for it.
- ``always-disagg-pd-decider``: yes, always (benchmarks, tests).
- ``always-disagg-multimodal-decider``: yes when the prompt has an image, audio or video part.
  Upstream's code asks its token producer for multimodal features while its documentation
  describes this content-part check; without a multimodal tokenizer here, the documented check it is.

Every answer is a :class:`~epp.framework.disaggregation.Verdict` with the numbers compared, for Explain.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Collection, Mapping
from typing import Any

from epp.framework.disaggregation import PrefixMatch, Verdict, prefix_match
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, SchedulingResult
from epp.plugins.prefix_index import PrefixIndex, chain_hashes

__all__ = [
    "ALWAYS_MULTIMODAL_TYPE",
    "ALWAYS_PD_TYPE",
    "PREFIX_BASED_TYPE",
    "AlwaysDisaggMultimodalDecider",
    "AlwaysDisaggPDDecider",
    "PrefixBasedPDDecider",
    "create_always_multimodal",
    "create_always_pd",
    "create_prefix_based",
    "prompt_tokens",
]


PREFIX_BASED_TYPE = "prefix-based-pd-decider"
ALWAYS_PD_TYPE = "always-disagg-pd-decider"
ALWAYS_MULTIMODAL_TYPE = "always-disagg-multimodal-decider"

_BYTES_PER_TOKEN = 4  # upstream's estimate backend packs 4 bytes into a pseudo-token
_BLOCK_TOKENS = 16  # upstream's approx-prefix-cache-producer defaults
_CAPACITY = 31_250
_MAX_BLOCKS = 131_072 // _BLOCK_TOKENS


def prompt_tokens(request: InferenceRequest) -> tuple[int, bool]:
    """The prompt's length in tokens, and whether it is an estimate (no token-producer ids)."""
    if request.token_ids is not None:
        return len(request.token_ids), False
    return math.ceil(len(request.prompt.prefix(sys.maxsize)) / _BYTES_PER_TOKEN), True


def _prompt_hashes(request: InferenceRequest, block_tokens: int) -> list[int]:
    """The prompt's chained block hashes over its text (``_BYTES_PER_TOKEN`` a token: no tokenizer needed)."""
    block = block_tokens * _BYTES_PER_TOKEN
    return chain_hashes(
        request.prompt.prefix(block * _MAX_BLOCKS),
        seed_parts=(request.target_model or request.model, request.cache_salt),
        block_bytes=block,
        max_blocks=_MAX_BLOCKS,
    )


class PrefixBasedPDDecider(NamedPlugin):
    """Remote prefill when the decode pod misses at least ``nonCachedTokens`` of the prompt."""

    __slots__ = ("_key", "index", "non_cached_tokens", "prompt_tokens")
    plugin_type = PREFIX_BASED_TYPE
    kinds = frozenset({PluginKind.PRE_REQUEST})

    def __init__(self, name: str, *, non_cached_tokens: int = 0, prompt_tokens: int = 0) -> None:
        super().__init__(name)
        self.non_cached_tokens = non_cached_tokens
        self.prompt_tokens = prompt_tokens
        self.index = PrefixIndex(_CAPACITY)
        self._key = f"{PREFIX_BASED_TYPE}/{name}/hashes"

    def _own_match(self, cycle: CycleState, request: InferenceRequest, endpoint: EndpointState) -> PrefixMatch:
        """Without a prefix-cache scorer on the decode profile: the decider's own approximate index."""
        engine_block = endpoint.metrics.cache_block_size
        tokens = engine_block if engine_block > 0 else _BLOCK_TOKENS  # upstream's autoTune
        hashes: list[int] | None = cycle.get(self._key)
        if hashes is None:
            hashes = cycle[self._key] = _prompt_hashes(request, tokens)
        return PrefixMatch(self.index.match(endpoint.endpoint.key, hashes), len(hashes), tokens)

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        hashes = cycle.get(self._key)
        if not hashes:
            return
        for profile in result.profile_results.values():
            if profile is not None and profile.targets:
                target = profile.targets[0]
                self.index.add(target.endpoint.key, hashes, target.metrics.cache_num_blocks)

    def endpoints_removed(self, keys: Collection[str]) -> None:
        self.index.forget(keys)

    def decide(self, cycle: CycleState, request: InferenceRequest, endpoint: EndpointState | None) -> Verdict:
        numbers: dict[str, float] = {"nonCachedTokens": self.non_cached_tokens, "promptTokens": self.prompt_tokens}
        if self.non_cached_tokens == 0:
            return Verdict(False, "disabled (nonCachedTokens is 0)", numbers)
        if endpoint is None:
            return Verdict(False, "no decode pick to compare the prompt with", numbers)
        length, estimated = prompt_tokens(request)
        numbers["prompt_tokens"] = length
        numbers["prompt_tokens_estimated"] = 1.0 if estimated else 0.0
        if self.prompt_tokens > 0 and length < self.prompt_tokens:
            return Verdict(False, f"prompt of {length} tokens is shorter than promptTokens", numbers)
        if length < self.non_cached_tokens:
            return Verdict(False, f"prompt of {length} tokens is shorter than nonCachedTokens", numbers)
        match = prefix_match(cycle, endpoint)
        if match is None:
            match = self._own_match(cycle, request, endpoint)
        cached = match.cached_tokens
        missing = length - cached
        numbers["cached_tokens"] = cached
        numbers["non_cached_tokens"] = missing
        if missing < self.non_cached_tokens:
            return Verdict(False, f"the decode pod lacks {missing} tokens, fewer than nonCachedTokens", numbers)
        return Verdict(True, f"the decode pod lacks {missing} tokens, at least nonCachedTokens", numbers)


class AlwaysDisaggPDDecider(NamedPlugin):
    __slots__ = ()
    plugin_type = ALWAYS_PD_TYPE

    def decide(self, cycle: CycleState, request: InferenceRequest, endpoint: EndpointState | None) -> Verdict:
        return Verdict(True, "always")


class AlwaysDisaggMultimodalDecider(NamedPlugin):
    __slots__ = ()
    plugin_type = ALWAYS_MULTIMODAL_TYPE

    def decide(self, cycle: CycleState, request: InferenceRequest, endpoint: EndpointState | None) -> Verdict:
        if request.prompt.multimodal:
            return Verdict(True, "the prompt has media parts")
        return Verdict(False, "the prompt has no media parts")


def create_prefix_based(name: str, parameters: Mapping[str, Any], context: PluginContext) -> PrefixBasedPDDecider:
    p = Params(PREFIX_BASED_TYPE, parameters)
    non_cached = p.integer("nonCachedTokens", 0, minimum=0)
    minimum = p.integer("promptTokens", 0, minimum=0)
    p.done()
    return PrefixBasedPDDecider(name, non_cached_tokens=non_cached, prompt_tokens=minimum)


def create_always_pd(name: str, parameters: Mapping[str, Any], context: PluginContext) -> AlwaysDisaggPDDecider:
    Params(ALWAYS_PD_TYPE, parameters).done()
    return AlwaysDisaggPDDecider(name)


def create_always_multimodal(
    name: str, parameters: Mapping[str, Any], context: PluginContext
) -> AlwaysDisaggMultimodalDecider:
    Params(ALWAYS_MULTIMODAL_TYPE, parameters).done()
    return AlwaysDisaggMultimodalDecider(name)
