"""What every JSON-body parser plugin shares: its identity, its kind, and the model rewrite of its body."""

from __future__ import annotations

from collections.abc import Sequence

from epp.framework.parsing import ParsedBody
from epp.framework.plugin import NamedPlugin, PluginKind
from epp.framework.request import ApiKind
from epp.plugins.parsers._json import with_model

__all__ = ["JsonBodyParser"]


class JsonBodyParser(NamedPlugin):
    """A parser of JSON bodies that carry a ``model`` field; subclasses say what they claim and how they parse."""

    __slots__ = ()
    kinds = frozenset({PluginKind.PARSER})
    _claims: Sequence[tuple[str, ApiKind]] = ()

    @property
    def claims(self) -> Sequence[tuple[str, ApiKind]]:
        return self._claims

    @property
    def fallback_api(self) -> ApiKind:
        return ApiKind.PASSTHROUGH

    def with_model(self, parsed: ParsedBody, model: str) -> bytes | None:
        return with_model(parsed.body, model)
