"""inflight-load-producer: how many tokens a routed request adds to its endpoint's in-flight load.

The counting itself is the request pipeline's (always on, O(1): two integers on the endpoint,
added at routing, subtracted when the stream ends however it ends); this plugin only sets the
estimate, with the llm-d router's parameters. Input tokens are estimated from the body size at
4 bytes a token (the picker does not tokenise; upstream counts a tokenised prompt). With
``addEstimatedOutputTokens`` the output estimate ``round(input × outputRatio)`` is added, capped by
the client's own cap (``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens``) and by
``maxEstimatedOutputTokens``. A configuration without this plugin uses its defaults (input only).
Unlike upstream, tokens are released when the response ends, not at its first chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest

__all__ = ["BYTES_PER_TOKEN", "TYPE", "InFlightLoadProducer", "create"]

TYPE = "inflight-load-producer"
BYTES_PER_TOKEN = 4


class InFlightLoadProducer(NamedPlugin):
    """Token estimate of a request: input from its size, output optionally from a ratio and caps."""

    __slots__ = ("add_output", "max_output", "output_ratio")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.IN_FLIGHT_ESTIMATOR})

    def __init__(
        self, name: str = "", *, add_output: bool = False, output_ratio: float = 1.5, max_output: int | None = None
    ) -> None:
        super().__init__(name)
        self.add_output = add_output
        self.output_ratio = output_ratio
        self.max_output = max_output

    def estimate_tokens(self, request: InferenceRequest) -> int:
        tokens = request.size // BYTES_PER_TOKEN
        if not self.add_output or tokens == 0:
            return tokens
        output = round(tokens * self.output_ratio)
        cap = request.max_output_tokens
        if cap is not None and cap < output:
            output = cap
        if self.max_output is not None and self.max_output < output:
            output = self.max_output
        return tokens + output


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> InFlightLoadProducer:
    params = Params(TYPE, parameters)
    add_output = params.boolean("addEstimatedOutputTokens", False)
    ratio = params.number("outputRatio", 1.5, minimum=0.0)
    cap = params.integer("maxEstimatedOutputTokens", -1, minimum=0) if "maxEstimatedOutputTokens" in parameters else -1
    params.done()
    return InFlightLoadProducer(name, add_output=add_output, output_ratio=ratio, max_output=cap if cap >= 0 else None)
