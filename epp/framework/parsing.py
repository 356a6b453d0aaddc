"""Which parser reads a request: the parser plugins' path claims and upstream's resolution table.

A parser plugin claims path suffixes, each naming the :class:`ApiKind` of the bodies sent there;
a parser with no claims is a fallback for every path no other parser claims. The table is
upstream's ``ParserRegistry`` (llm-d router ``pkg/epp/handlers/parsers.go``): parsers are taken
in the configured order, a second parser of a type already taken is skipped, and the first
fallback ends the list (parsers after it are skipped). A path resolves to the longest claimed
suffix it ends with (plain string suffix, after the query is cut and a trailing ``/`` trimmed),
else to the fallback, else it is refused with 400, as upstream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from epp.errors import EppError, ErrorCode
from epp.framework.plugin import TypedName
from epp.framework.request import ApiKind

__all__ = ["Parser", "ParserTable", "request_path"]

log = logging.getLogger(__name__)

_PATH_HEADERS = (":path", "x-original-path", "x-forwarded-path")
_DEFAULT_PATH = "/v1/completions"  # upstream: kept for clients that send no path


@runtime_checkable
class Parser(Protocol):
    """A request parser plugin: the path suffixes it claims and the API of each (none: fallback)."""

    @property
    def typed_name(self) -> TypedName: ...

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
        claims: list[tuple[str, ApiKind]] = []
        self.parsers: list[Parser] = []
        self._fallback: ApiKind | None = None
        ordered = list(parsers)
        for i, parser in enumerate(ordered):
            type_name = parser.typed_name.type
            if type_name in taken:
                log.warning("parser type already registered; skipping", extra={"parser": str(parser.typed_name)})
                continue
            taken.add(type_name)
            self.parsers.append(parser)
            if not parser.claims:
                self._fallback = parser.fallback_api
                for skipped in ordered[i + 1 :]:
                    log.warning(
                        "parser configured after the fallback parser is skipped",
                        extra={"parser": str(skipped.typed_name), "fallback": str(parser.typed_name)},
                    )
                break
            claims.extend((suffix.strip().strip("/"), api) for suffix, api in parser.claims)
        # Longest first, so the first match is the longest; ties keep configuration order (stable sort).
        self._claims = tuple(sorted(claims, key=lambda claim: -len(claim[0])))

    def resolve(self, path: str) -> ApiKind:
        """The API of a request to ``path``; ``EppError(BAD_REQUEST)`` when no parser takes it."""
        trimmed = path.strip().rstrip("/")
        for suffix, api in self._claims:
            if trimmed.endswith(suffix):
                return api
        if self._fallback is not None:
            return self._fallback
        raise EppError(ErrorCode.BAD_REQUEST, f"no parser registered matching path suffix for: {path}")
