"""The data plugins exchange: what each declares it produces and reads, and the scope that holds it to that.

Upstream's contract (llm-d router ``framework/interface/plugin``: ``DataKey``, ``ProducerPlugin``,
``ConsumerPlugin``, and ``datalayer/endpoint_scope.go``): a piece of data is named by a
:class:`DataKey`, its kind and the name of the plugin that produces it
(``PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer``). A producer declares the keys it
writes (:class:`Producing`), a consumer the keys it reads, required or optional
(:class:`Consuming`). The loader refuses a configuration whose required keys nobody produces (or
adds the producer upstream registers as the key's default, ``epp.config.data_graph``) and runs
the producers in dependency order.

At run time the data lives in the request's attribute store (``InferenceRequest.attributes``,
keyed by :attr:`DataKey.id`), and a plugin reaches it only through the :class:`DataScope` the
loader made from its declarations: a read of a key it did not declare resolves as absent, a
write of one it does not produce is dropped and raises :class:`DataScopeError` (a producer's
failure: the request goes on without that data, as upstream's director does). Both are counted
(``report``, bound by the runtime to ``llm_d_epp_plugin_data_scope_violations_total``) and the
first of each kind is logged. A plugin that declares nothing reaches nothing. The check is a
frozenset lookup on the key's precomputed string: nothing is wrapped or allocated per call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from epp.framework.plugin import Plugin, TypedName, declared_kinds
from epp.framework.request import InferenceRequest

__all__ = [
    "NO_DATA",
    "Consuming",
    "DataKey",
    "DataScope",
    "DataScopeError",
    "DataScoped",
    "Dependencies",
    "Producing",
]

log = logging.getLogger(__name__)

READ = "read"
WRITE = "write"


@dataclass(frozen=True, slots=True)
class DataKey:
    """A piece of data: its kind (``attribute``) and the name of the plugin producing it."""

    attribute: str
    producer: str
    id: str = field(init=False, compare=False, repr=False)
    """``<attribute>/<producer>`` (upstream's ``DataKey.String()``): the attribute store's key."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", f"{self.attribute}/{self.producer}")

    def named(self, producer: str) -> DataKey:
        """This key as produced by ``producer``; itself when that is empty (``WithNonEmptyProducerName``)."""
        return DataKey(self.attribute, producer) if producer else self

    def __str__(self) -> str:
        return self.id


@dataclass(frozen=True, slots=True)
class Dependencies:
    """Keys a consumer reads, with the type of their values: required (a producer must exist) and optional."""

    required: Mapping[DataKey, type] = field(default_factory=dict)
    optional: Mapping[DataKey, type] = field(default_factory=dict)


@runtime_checkable
class Producing(Protocol):
    """A plugin that writes data for others: the keys it produces and the type of each value."""

    @property
    def typed_name(self) -> TypedName: ...

    def produces(self) -> Mapping[DataKey, type]: ...


@runtime_checkable
class Consuming(Protocol):
    """A plugin that reads data another plugin produces."""

    @property
    def typed_name(self) -> TypedName: ...

    def consumes(self) -> Dependencies: ...


class DataScopeError(Exception):
    """A plugin wrote a key it does not declare it produces (the write was dropped)."""


Report = Callable[["DataScope", str, DataKey], None]


class DataScope:
    """What one plugin may read (what it consumes or produces) and write (what it produces) of a request's data."""

    __slots__ = ("_logged", "kinds", "owner", "readable", "rejected", "report", "writable")

    def __init__(self, owner: TypedName, *, readable: frozenset[str], writable: frozenset[str], kinds: str) -> None:
        self.owner = owner
        self.readable = readable
        self.writable = writable
        self.rejected: dict[tuple[str, str], int] = {}
        """(access, key id) → accesses refused so far."""
        self.report: Report | None = None
        """Told of every refused access (the runtime counts them in a metric); None: only counted here."""
        self._logged: set[tuple[str, str]] = set()
        self.kinds = kinds
        """The plugin's declared kinds, ``+``-joined (the metric's ``extension_point``)."""

    @classmethod
    def of(cls, plugin: Plugin) -> DataScope:
        """The scope ``plugin``'s declarations allow (nothing for a plugin that declares nothing)."""
        produced = frozenset(k.id for k in plugin.produces()) if isinstance(plugin, Producing) else frozenset()
        read = produced
        if isinstance(plugin, Consuming):
            deps = plugin.consumes()
            read = read | {k.id for k in deps.required} | {k.id for k in deps.optional}
        kinds = "+".join(sorted(declared_kinds(plugin))) or "none"
        return cls(plugin.typed_name, readable=read, writable=produced, kinds=kinds)

    def get(self, request: InferenceRequest, key: DataKey) -> Any:
        """The value of ``key`` for ``request``; None when absent or when the plugin did not declare it."""
        if key.id in self.readable:
            return request.attributes.get(key.id)
        self._reject(READ, key)
        return None

    def put(self, request: InferenceRequest, key: DataKey, value: Any) -> None:
        """Publish ``value`` under ``key``; raises :class:`DataScopeError` (and drops it) when undeclared."""
        if key.id in self.writable:
            request.attributes[key.id] = value
            return
        self._reject(WRITE, key)
        raise DataScopeError(
            f"plugin {self.owner} wrote undeclared data {key.id!r}; add it to what the plugin produces"
        )

    def _reject(self, access: str, key: DataKey) -> None:
        seen = (access, key.id)
        self.rejected[seen] = self.rejected.get(seen, 0) + 1
        report = self.report
        if report is not None:
            report(self, access, key)
        if seen not in self._logged:
            self._logged.add(seen)
            verb = "read" if access == READ else "wrote"
            log.error(
                "rejected data access outside the plugin's declarations",
                extra={"plugin": str(self.owner), "access": access, "data_key": key.id, "verb": verb},
            )


NO_DATA = DataScope(TypedName("", ""), readable=frozenset(), writable=frozenset(), kinds="none")
"""The scope of a plugin the loader has not bound: it reaches nothing."""


@runtime_checkable
class DataScoped(Protocol):
    """A plugin that reads or writes request data: the loader hands it its :class:`DataScope`."""

    def bind_data_scope(self, scope: DataScope) -> None: ...
