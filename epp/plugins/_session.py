"""Session affinity shared by ``session-affinity-scorer`` and ``session-affinity-filter``: the two strategies.

Upstream's ``scheduling/util/sessionaffinity``. A helper, not a plugin: both plugin modules read
their parameters and resolve a session's endpoint through it, then add their own output (a score,
or the candidate set).

- ``encoded_endpoint_header`` (stateless, the default): the request header (``x-session-token``)
  carries the base64 of the ``namespace/name`` of the endpoint that served the session; the
  response carries the token of the endpoint chosen now (of the ``profileName`` profile's pick
  when set, else the primary's), for the client to send back. Tokens are encoded as upstream's
  (standard base64, padded); url-safe or unpadded ones (this picker's before) are read too.
- ``session_id`` (stateful): the session id comes from the first source that has one (a request
  header, or a request attribute another plugin published); a server-side binding, session id →
  endpoint, is made or refreshed when a request is routed (PreRequest), moved to the new endpoint
  only when the bound one was not a candidate, and forgotten after ``evictionTtlSeconds`` unused
  (swept at most every ``evictionSweepSeconds``, on the next request: no background task). An
  unbound session has no preference. Nothing is written back to the client.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from epp.clock import Clock
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError
from epp.framework.request import InferenceRequest, attribute_key
from epp.framework.scheduling import CycleState, SchedulingResult

__all__ = [
    "ENCODED_ENDPOINT_HEADER",
    "SESSION_ID",
    "SessionAffinity",
    "SessionPlugin",
    "decode_token",
    "encode_token",
    "session_affinity",
]

ENCODED_ENDPOINT_HEADER = "encoded_endpoint_header"
SESSION_ID = "session_id"
DEFAULT_HEADER = "x-session-token"
DEFAULT_SESSION_ID_HEADER = "x-session-id"


def encode_token(endpoint_key: str) -> str:
    """Upstream's token: standard base64 of the endpoint's ``namespace/name``."""
    return base64.b64encode(endpoint_key.encode()).decode()


def decode_token(token: str) -> str | None:
    """The endpoint key inside a token (standard or url-safe base64, padded or not), or None."""
    token = token.strip()
    padded = token + "=" * (-len(token) % 4)
    altchars = b"-_" if ("-" in token or "_" in token) else None
    try:
        key = base64.b64decode(padded, altchars=altchars, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return key or None


@dataclass(frozen=True, slots=True)
class _Source:
    header: str = ""
    attribute: str = ""
    """A request-attribute key, ``<attribute>/<producer>``."""


class _Bindings:
    """Session id → (endpoint key, last use), swept of expired entries at most every ``sweep`` seconds."""

    __slots__ = ("_bindings", "_clock", "_next_sweep", "_sweep", "_ttl")

    def __init__(self, clock: Clock, ttl: float, sweep: float) -> None:
        self._clock = clock
        self._ttl = ttl
        self._sweep = sweep
        self._bindings: dict[str, tuple[str, float]] = {}
        self._next_sweep = clock.now() + sweep

    def __len__(self) -> int:
        return len(self._bindings)

    def bound(self, session: str) -> str | None:
        self._maybe_sweep()
        entry = self._bindings.get(session)
        return entry[0] if entry is not None else None

    def bind(self, session: str, endpoint_key: str) -> None:
        self._bindings[session] = (endpoint_key, self._clock.now())

    def _maybe_sweep(self) -> None:
        now = self._clock.now()
        if now < self._next_sweep:
            return
        self._next_sweep = now + self._sweep
        limit = now - self._ttl
        expired = [s for s, (_, seen) in self._bindings.items() if seen < limit]
        for session in expired:
            del self._bindings[session]


class SessionAffinity:
    """One plugin instance's strategy: which candidate the session is pinned to, and what a decision records."""

    __slots__ = ("_bindings", "_presence_key", "_sources", "header", "profile_name", "strategy")

    def __init__(
        self,
        *,
        strategy: str,
        header: str,
        profile_name: str,
        sources: Sequence[_Source] = (),
        bindings: _Bindings | None = None,
        presence_key: str = "",
    ) -> None:
        self.strategy = strategy
        self.header = header
        self.profile_name = profile_name
        self._sources = tuple(sources)
        self._bindings = bindings
        self._presence_key = presence_key

    @property
    def bindings(self) -> int:
        """Live session bindings (``session_id``), 0 for the stateless strategy."""
        return len(self._bindings) if self._bindings is not None else 0

    def chosen(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> EndpointState | None:
        """The candidate the session is pinned to, or None (no session, unbound, or its endpoint is not a candidate)."""
        if not candidates:
            return None
        if self._bindings is None:
            token = request.headers.get(self.header)
            key = decode_token(token) if token else None
        else:
            session = self._session_id(request)
            key = self._bindings.bound(session) if session else None
            if key is not None:  # for PreRequest: a session moves only when its endpoint was absent
                cycle[self._presence_key] = any(c.endpoint.key == key for c in candidates)
        if key is None:
            return None
        return next((c for c in candidates if c.endpoint.key == key), None)

    def routed(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        """PreRequest: bind the session to the endpoint chosen (``session_id``; nothing for the stateless strategy)."""
        bindings = self._bindings
        if bindings is None:
            return
        session = self._session_id(request)
        target = self.target(result)
        if not session or target is None:
            return
        key = target.endpoint.key
        bound = bindings.bound(session)
        # Refresh a binding to the same endpoint; move it only on a confirmed absence (this
        # request's own check said its endpoint was no candidate), never on a mere other pick.
        if bound is None or bound == key or cycle.get(self._presence_key) is False:
            bindings.bind(session, key)

    def response_headers(self, result: SchedulingResult) -> Mapping[str, str]:
        """The token of the chosen endpoint (``encoded_endpoint_header``); nothing for ``session_id``."""
        if self._bindings is not None:
            return {}
        target = self.target(result)
        return {self.header: encode_token(target.endpoint.key)} if target is not None else {}

    def target(self, result: SchedulingResult) -> EndpointState | None:
        """The endpoint this instance pins: the ``profileName`` profile's pick (None when it did not run),
        else the primary's."""
        name = self.profile_name or result.primary_profile
        profile = result.profile_results.get(name)
        return profile.targets[0] if profile is not None and profile.targets else None

    def _session_id(self, request: InferenceRequest) -> str:
        for source in self._sources:
            if source.header:
                value = request.headers.get(source.header, "").strip()
            else:
                raw = request.attributes.get(source.attribute)
                value = raw.strip() if isinstance(raw, str) else ""
            if value:
                return value
        return ""


class SessionPlugin(NamedPlugin):
    """What the scorer and the filter share: a strategy, its PreRequest binding and its response token."""

    __slots__ = ("session",)

    def __init__(self, name: str, session: SessionAffinity) -> None:
        super().__init__(name)
        self.session = session

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        self.session.routed(cycle, request, result)

    def response_headers(self, request: InferenceRequest, result: SchedulingResult) -> Mapping[str, str]:
        return self.session.response_headers(result)


def _header(name: str | None) -> str:
    """A configured header name as the picker stores request headers: trimmed, lower-case; "" → the default."""
    return (name or "").strip().lower() or DEFAULT_HEADER


def session_affinity(
    type_name: str, name: str, params: Mapping[str, Any], clock: Clock, *, legacy_header: bool = False
) -> SessionAffinity:
    """Read upstream's parameters (``strategy``, ``profileName``, ``encodedEndpointHeaderConfig``,
    ``sessionIdConfig``); ``legacy_header`` also takes this picker's older ``headerName``."""
    p = Params(type_name, params)
    strategy = p.choice("strategy", ENCODED_ENDPOINT_HEADER, (ENCODED_ENDPOINT_HEADER, SESSION_ID))
    profile_name = p.text("profileName") or ""
    header_config = p.nested("encodedEndpointHeaderConfig")
    header = _header(header_config.text("header") if header_config is not None else None)
    if header_config is not None:
        header_config.done()
    if legacy_header and p.present("headerName"):
        header = _header(p.string("headerName", DEFAULT_HEADER))
    id_config = p.nested("sessionIdConfig")
    p.done()
    if strategy == ENCODED_ENDPOINT_HEADER:
        return SessionAffinity(strategy=strategy, header=header, profile_name=profile_name)
    sources: list[_Source] = []
    ttl, sweep = 300.0, 10.0
    if id_config is not None:
        for i, entry in enumerate(id_config.mappings("sources")):
            source_header = entry.text("header") or ""
            attribute = entry.text("attribute") or ""
            producer = entry.text("producer") or ""
            entry.done()
            if bool(source_header) == bool(attribute):
                raise PluginConfigError(
                    f"{type_name}.parameters.sessionIdConfig.sources[{i}]: "
                    "exactly one of header or attribute must be set"
                )
            if source_header:
                sources.append(_Source(header=_header(source_header)))
            else:
                sources.append(_Source(attribute=attribute_key(attribute, producer)))
        # Upstream reads 0 as unset (its defaults apply); below 0 is an error.
        ttl = id_config.number("evictionTtlSeconds", 0.0, minimum=0.0) or ttl
        sweep = id_config.number("evictionSweepSeconds", 0.0, minimum=0.0) or sweep
        id_config.done()
    return SessionAffinity(
        strategy=strategy,
        header=header,
        profile_name=profile_name,
        sources=sources or (_Source(header=DEFAULT_SESSION_ID_HEADER),),
        bindings=_Bindings(clock, ttl, sweep),
        presence_key=f"{type_name}/{name}/bound-present",
    )
