"""session-id-producer: the request's session id, from a header or a cookie, for session-aware plugins.

The llm-d router's producer (``requestcontrol/dataproducer/sessionid``): before scheduling it
reads the session id from the request header ``headerName`` (case-insensitive) or from the cookie
``cookieName`` of the ``Cookie`` header (``name=value`` pairs split on ``;``), exactly one of
the two, and publishes it, trimmed, as ``SessionIDDataKey/<this plugin's name>`` (a string). A
request without one gets nothing (no session preference). It is the default producer of that
key, but needs one of its parameters, so a configuration that reads a session id without
declaring it is refused naming both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.data import NO_DATA, DataKey, DataScope
from epp.framework.data_keys import SESSION_ID
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest

__all__ = ["TYPE", "SessionIdProducer", "cookie_value", "create"]

TYPE = "session-id-producer"
_COOKIE = "cookie"


def cookie_value(header: str, name: str) -> str:
    """The value of cookie ``name`` in a ``Cookie`` header ("" when absent), read as upstream reads it."""
    if not header or not name:
        return ""
    for pair in header.split(";"):
        key, sep, value = pair.strip().partition("=")
        if sep and key == name:
            return value
    return ""


class SessionIdProducer(NamedPlugin):
    """DataProducer: ``SessionIDDataKey/<name>`` from a header or a cookie."""

    __slots__ = ("_data", "cookie_name", "header_name", "key")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.DATA_PRODUCER})

    def __init__(self, name: str = TYPE, *, header_name: str = "", cookie_name: str = "") -> None:
        super().__init__(name)
        self.header_name = header_name.strip().lower()
        self.cookie_name = cookie_name.strip()
        self.key = SESSION_ID.named(name)
        self._data: DataScope = NO_DATA

    def produces(self) -> Mapping[DataKey, type]:
        return {self.key: str}

    def bind_data_scope(self, scope: DataScope) -> None:
        self._data = scope

    def session_id(self, request: InferenceRequest) -> str:
        headers = request.headers
        if self.header_name:
            return headers.get(self.header_name, "").strip()
        return cookie_value(headers.get(_COOKIE, ""), self.cookie_name).strip()

    async def produce(self, request: InferenceRequest, candidates: Sequence[EndpointState] = ()) -> None:
        session = self.session_id(request)
        if session:
            self._data.put(request, self.key, session)


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> SessionIdProducer:
    """Factory; exactly one of ``headerName`` and ``cookieName``, as upstream."""
    p = Params(TYPE, params)
    header = (p.text("headerName") or "").strip()
    cookie = (p.text("cookieName") or "").strip()
    p.done()
    if bool(header) == bool(cookie):
        got = "both" if header else "neither"
        raise PluginConfigError(f"{TYPE}.parameters: set exactly one of headerName and cookieName, got {got}")
    return SessionIdProducer(name, header_name=header, cookie_name=cookie)
