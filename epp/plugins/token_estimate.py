"""token-producer's ``estimate`` backend: pseudo-tokens from the prompt's bytes, no tokenizer, no service.

The llm-d router's default backend (a ``token-producer`` with no ``vllm``, ``local`` or
``modelName``), and the one the loader adds when a configuration's plugins read the tokenized
prompt and none is declared (the approximate prefix index, through ``approx-prefix-cache-producer``).
Each four bytes of the prompt, as its parser reads it, are one pseudo-token
(:class:`~epp.framework.data_keys.EstimatedTokens`, packed lazily: nothing is computed until a
plugin reads them); token ids the client sent itself (vLLM's generate, a completions prompt of
integers) are passed through as they are. Pseudo-tokens match no engine's KV blocks:
``precise-prefix-cache-producer`` ignores them (as if the request had no tokens), where upstream
hashes them into keys that never match. Upstream's multimodal placeholder tuning
(``estimate.image``, ``estimate.video``) is refused by name: image and video parts count here
for nothing, not for an estimated number of placeholders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from epp.framework.data import DataKey
from epp.framework.data_keys import TOKENIZED_PROMPT, EstimatedTokens, TokenizedPrompt
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginKind
from epp.framework.prompt import EMPTY_PROMPT, TokenPrompt
from epp.framework.request import InferenceRequest

__all__ = ["EstimatingTokenProducer", "estimate_parameters"]

TYPE = "token-producer"


class EstimatingTokenProducer(NamedPlugin):
    """DataProducer: ``request.token_ids`` as the client's own ids, else the prompt's pseudo-tokens."""

    __slots__ = ()
    plugin_type = TYPE
    kinds = frozenset({PluginKind.DATA_PRODUCER})

    def produces(self) -> Mapping[DataKey, type]:
        return {TOKENIZED_PROMPT.named(self.typed_name.name): TokenizedPrompt}

    async def produce(self, request: InferenceRequest, candidates: Sequence[EndpointState] = ()) -> None:
        if request.token_ids is not None:
            return
        prompt = request.prompt
        if isinstance(prompt, TokenPrompt):
            ids = prompt.token_ids
            if all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                request.token_ids = ids
            return  # a batch of prompts (nested lists) has no one token sequence
        if prompt is not EMPTY_PROMPT:
            request.token_ids = EstimatedTokens(prompt)


def estimate_parameters(p: Params | None) -> None:
    """Validate ``parameters.estimate``: an empty mapping, or the multimodal tuning this picker refuses."""
    if p is None:
        return
    for refused in ("image", "video"):
        if p.present(refused):
            raise PluginConfigError(
                f"{TYPE}.parameters.estimate.{refused}: multimodal placeholder estimation is not built here "
                "(image and video parts add no pseudo-tokens); remove it"
            )
    p.done()
