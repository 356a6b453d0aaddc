"""Request parsers: the contract (each parser plugin owns its API's bodies) and upstream's resolution table.

A parser plugin claims path suffixes, each naming the :class:`ApiKind` of the bodies sent there;
a parser with no claims is a fallback for every path no other parser claims. The parser that takes
a request owns everything its API decides: decoding and validating the body (``parse``, with the
upstream parser's 400 messages), the prompt plugins read (:mod:`epp.framework.prompt`), the
client's output cap, the body forwarded after a model rewrite (``with_model``) and whether the
response is read at all. A new API is one parser plugin. The table is
upstream's ``ParserRegistry`` (llm-d router ``pkg/epp/handlers/parsers.go``): parsers are taken
in the configured order, a second parser of a type already taken is skipped, and the first
fallback ends the list (parsers after it are skipped). A path resolves to the longest claimed
suffix it ends with (plain string suffix, after the query is cut and a trailing ``/`` trimmed),
else to the fallback, else it is refused with 400, as upstream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from epp.errors import EppError, ErrorCode
from epp.framework.plugin import TypedName
from epp.framework.prompt import EMPTY_PROMPT, Prompt
from epp.framework.request import ApiKind, InferenceRequest

__all__ = ["ParsedBody", "Parser", "ParserTable", "request_path"]

log = logging.getLogger(__name__)

_PATH_HEADERS = (":path", "x-original-path", "x-forwarded-path")
_DEFAULT_PATH = "/v1/completions"  # upstream: kept for clients that send no path


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """A validated request body: ``body`` is the decoded JSON as the client sent it (empty when unread)."""

    body: Mapping[str, Any]
    model: str
    api: ApiKind
    stream: bool = False
    max_output_tokens: int | None = None
    """The client's own output cap (the API's ``max_tokens``), None when it set none."""
    prompt: Prompt = EMPTY_PROMPT
    reads_response: bool = True
    """False when the response is neither held nor scanned (the passthrough parser reads none)."""

    def apply_to(self, request: InferenceRequest, size: int) -> None:
        """Give ``request`` what routing reads from its body (``size``: the body's bytes as received)."""
        request.body = self.body
        request.model = self.model
        request.api = self.api
        request.stream = self.stream
        request.max_output_tokens = self.max_output_tokens
        request.prompt = self.prompt
        request.size = size


@runtime_checkable
class Parser(Protocol):
    """A request parser plugin: the path suffixes it claims and the API of each (none: fallback)."""

    @property
    def typed_name(self) -> TypedName: ...

    def parse(self, raw: bytes, api: ApiKind) -> ParsedBody:
        """Decode and validate ``raw`` as a body of ``api`` (one this parser claims or falls back to);
        ``EppError(BAD_REQUEST)`` naming the problem when it is not one."""
        ...

    def with_model(self, parsed: ParsedBody, model: str) -> bytes | None:
        """The body to forward when the model server is to be sent ``model`` instead of the client's,
        a new serialisation (``parsed.body`` is left as the client sent it); None when this API's body
        carries no model to rewrite."""
        ...

    @property
    def claims(self) -> Sequence[tuple[str, ApiKind]]:
        """``(suffix, api)`` pairs, e.g. ``("messages", ApiKind.MESSAGES)``; empty for a fallback."""
        ...

    @property
    def fallback_api(self) -> ApiKind:
        """The API of a request this parser takes as the fallback (only read when ``claims`` is empty)."""
        ...


def request_path(headers: Mapping[str, str]) -> str:
    """The request's path without its query: ``:path``, else the forwarded-path headers, else completions."""
    for name in _PATH_HEADERS:
        value = headers.get(name)
        if value:
            return value.partition("?")[0]
    return _DEFAULT_PATH


class ParserTable:
    """Path → API, built once per loaded configuration from its ordered parsers."""

    __slots__ = ("_claims", "_fallback", "parsers")

    def __init__(self, parsers: Iterable[Parser]) -> None:
        taken: set[str] = set()
        claims: list[tuple[str, Parser, ApiKind]] = []
        self.parsers: list[Parser] = []
        self._fallback: tuple[Parser, ApiKind] | None = None
        ordered = list(parsers)
        for i, parser in enumerate(ordered):
            type_name = parser.typed_name.type
            if type_name in taken:
                log.warning("parser type already registered; skipping", extra={"parser": str(parser.typed_name)})
                continue
            taken.add(type_name)
            self.parsers.append(parser)
            if not parser.claims:
                self._fallback = (parser, parser.fallback_api)
                for skipped in ordered[i + 1 :]:
                    log.warning(
                        "parser configured after the fallback parser is skipped",
                        extra={"parser": str(skipped.typed_name), "fallback": str(parser.typed_name)},
                    )
                break
            claims.extend((suffix.strip().strip("/"), parser, api) for suffix, api in parser.claims)
        # Longest first, so the first match is the longest; ties keep configuration order (stable sort).
        self._claims = tuple(sorted(claims, key=lambda claim: -len(claim[0])))

    def resolve(self, path: str) -> tuple[Parser, ApiKind]:
        """The parser of a request to ``path`` and the API it reads it as; ``EppError(BAD_REQUEST)``
        when none takes it."""
        trimmed = path.strip().rstrip("/")
        for suffix, parser, api in self._claims:
            if trimmed.endswith(suffix):
                return parser, api
        if self._fallback is not None:
            return self._fallback
        raise EppError(ErrorCode.BAD_REQUEST, f"no parser registered matching path suffix for: {path}")
