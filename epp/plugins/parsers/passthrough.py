"""``passthrough-parser``: claims no path, so it takes every path the other parsers leave.

The body is never decoded and is forwarded as sent; the request is routed on its headers alone and
its response is neither held nor scanned (upstream's ``SkipResponseProcessing``).
"""

from __future__ import annotations

from collections.abc import Sequence

from epp.framework.parsing import ParsedBody
from epp.framework.plugin import NamedPlugin, PluginKind
from epp.framework.request import ApiKind

__all__ = ["TYPE", "PassthroughParser"]

TYPE = "passthrough-parser"

_UNREAD = ParsedBody(body={}, model="", api=ApiKind.PASSTHROUGH, reads_response=False)


class PassthroughParser(NamedPlugin):
    __slots__ = ()
    plugin_type = TYPE
    kinds = frozenset({PluginKind.PARSER})

    @property
    def claims(self) -> Sequence[tuple[str, ApiKind]]:
        return ()

    @property
    def fallback_api(self) -> ApiKind:
        return ApiKind.PASSTHROUGH

    def parse(self, raw: bytes, api: ApiKind) -> ParsedBody:
        return _UNREAD

    def with_model(self, parsed: ParsedBody, model: str) -> bytes | None:
        return None
