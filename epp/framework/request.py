"""The request as the scheduler and plugins see it, after the body was parsed once."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from epp.framework import headers as wire
from epp.framework.endpoint import EndpointState, join_host_port
from epp.framework.prompt import EMPTY_PROMPT, Prompt

__all__ = ["ApiKind", "InferenceRequest", "RoutingDecision", "attribute_key"]


def attribute_key(attribute: str, producer: str = "") -> str:
    """The key of a request attribute: upstream's ``DataKey`` string, ``<attribute>/<producer>``."""
    return f"{attribute}/{producer}"


class ApiKind(enum.Enum):
    """The API a body belongs to, chosen by the parser that claims the request's path suffix.

    OpenAI's (``openai-parser``), Anthropic's Messages and count_tokens (``anthropic-parser``),
    vLLM's generate (``vllmhttp-parser``), SGLang's generate (``sglanghttp-parser``);
    ``PASSTHROUGH`` is a body nobody reads (``passthrough-parser``).
    """

    COMPLETIONS = "completions"
    CHAT_COMPLETIONS = "chat/completions"
    RESPONSES = "responses"
    CONVERSATIONS = "conversations"
    EMBEDDINGS = "embeddings"
    IMAGES_GENERATIONS = "images/generations"
    MESSAGES = "messages"
    COUNT_TOKENS = "messages/count_tokens"
    GENERATE = "inference/v1/generate"
    SGLANG_GENERATE = "generate"
    PASSTHROUGH = "passthrough"
    NONE = "none"  # header-only request (GET): no body


@dataclass(slots=True)
class InferenceRequest:
    """One request being scheduled.

    ``model`` is what the client asked for, ``target_model`` what the model server will be sent
    (after InferenceModel split / InferenceModelRewrite). ``priority`` < 0 is sheddable.
    ``body`` is the parsed JSON as the client sent it (never copied, never changed: what goes upstream
    after a model rewrite is a rewritten copy); ``prompt`` is the prompt as the API's parser read it
    (what prefix matching and tokenization use); ``headers`` are the client's, lower-case keys;
    ``upstream_headers`` are what the picker sets on the request it forwards (a request id it
    made up, the trace context). ``max_output_tokens`` is the client's own output cap (the API's
    ``max_tokens`` field), None when it set none; ``in_flight_tokens`` is what the request added
    to its endpoint's in-flight token count, released with it. ``token_ids`` is the prompt as the
    engine tokenizes it, when a ``token-producer`` produced it before scheduling (else None).
    ``queue_wait`` is the seconds the request waited in the flow-control queue before it was
    dispatched (None when it was not queued). ``attributes`` are what plugins publish about the
    request for other plugins (upstream's request attributes, and per-request endpoint
    attributes), keyed ``<attribute>/<producer>`` (:func:`attribute_key`, a
    :class:`~epp.framework.data.DataKey`'s ``id``); plugins that declare the data they exchange
    reach it through their :class:`~epp.framework.data.DataScope`.
    """

    request_id: str
    model: str = ""
    target_model: str = ""
    priority: int = 0
    objective: str = ""
    api: ApiKind = ApiKind.COMPLETIONS
    stream: bool = False
    body: Mapping[str, Any] = field(default_factory=dict)
    prompt: Prompt = EMPTY_PROMPT
    headers: Mapping[str, str] = field(default_factory=dict)
    upstream_headers: dict[str, str] = field(default_factory=dict)
    size: int = 0
    max_output_tokens: int | None = None
    in_flight_tokens: int = 0
    token_ids: Sequence[int] | None = None
    queue_wait: float | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    fairness_id: str = ""
    """The flow this request belongs to, once the pipeline resolved it ("": not yet, see :meth:`flow`)."""

    @property
    def sheddable(self) -> bool:
        return self.priority < 0

    def flow(self) -> str:
        """The fairness id flow control and the request series use: the one the pipeline resolved (an
        explicit header, else an agent's session identity), else the header, else ``default-flow``."""
        return self.fairness_id or wire.read(self.headers, wire.FAIRNESS_ID) or wire.DEFAULT_FAIRNESS_ID

    @property
    def cache_salt(self) -> str:
        """What isolates this request's prefix cache from others': vLLM's ``cache_salt``, SGLang's ``extra_key``."""
        salt = self.body.get("extra_key" if self.api is ApiKind.SGLANG_GENERATE else "cache_salt")
        return salt if isinstance(salt, str) else ""


@dataclass(slots=True)
class RoutingDecision:
    """Where a request goes: ``targets`` best first (more than one = fallback list).

    ``port``, when set, replaces the targets' own port in the destination (the deprecated
    data-parallel ``primaryPort``): the targets stay the endpoints that serve the request, for
    in-flight counting and health.
    """

    targets: list[EndpointState]
    # Headers the picker adds to the response the client receives (e.g. a session token).
    response_headers: dict[str, str] = field(default_factory=dict)
    # Headers the scheduling profiles add to the request forwarded to the target (e.g. where to prefill).
    upstream_headers: dict[str, str] = field(default_factory=dict)
    # Headers the picker owns on the forwarded request: the client's copies are removed.
    cleared_headers: frozenset[str] = frozenset()
    # ``--emit-endpoint-scores``: every scored candidate's ``ip:port`` → weighted score (else None).
    endpoint_scores: dict[str, float] | None = None
    port: int = 0

    @property
    def destination(self) -> str:
        """Value of ``x-gateway-destination-endpoint``: ``ip:port[,ip:port...]``."""
        if self.port:
            return ",".join(join_host_port(t.endpoint.address, self.port) for t in self.targets)
        return ",".join(t.endpoint.hostport for t in self.targets)
