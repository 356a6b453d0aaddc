"""One kind served by two API groups, merged into the store with one precedence rule.

InferenceObjective and InferenceModelRewrite exist in the llm-d router's group (``llm-d.ai``)
and in GIE's (``inference.networking.x-k8s.io``). The llm-d router watches only ``llm-d.ai`` when
a cluster serves both and ignores every legacy object; during a migration that drops the
objectives nobody has moved yet. We watch both groups and merge them here:

- every object of our pool, from either group, reaches the store;
- when both groups hold an object of the same namespace and name, the ``llm-d.ai`` one wins and
  the legacy one is *shadowed*: logged once per name, and counted in
  ``epp_api_group_shadowed_objects{pool,kind}`` while it lasts;
- when the winner goes away the shadowed object takes its place; when it comes back it wins again.

Each group's :class:`~epp.kube.keyed.KeyedReconciler` writes through :meth:`GroupMerge.winning`
or :meth:`GroupMerge.legacy` instead of the store. Pure bookkeeping; no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from epp.kube.resources import ResourceKind

__all__ = ["GroupMerge", "Sink"]

log = logging.getLogger(__name__)


class _Named(Protocol):
    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


SpecT = TypeVar("SpecT", bound=_Named)
Key = tuple[str, str]


class Sink(Generic[SpecT]):
    """Where a reconciler writes: ``store(spec)`` and ``remove(namespace, name)``."""

    __slots__ = ("remove", "store")

    def __init__(self, store: Callable[[SpecT], None], remove: Callable[[str, str], None]) -> None:
        self.store = store
        self.remove = remove


class GroupMerge(Generic[SpecT]):
    """The objects of one kind from both groups; decides what ``target`` (the store) holds."""

    def __init__(
        self,
        kinds: tuple[ResourceKind, ResourceKind],
        target: Sink[SpecT],
        *,
        on_shadowed: Callable[[int], None] | None = None,
    ) -> None:
        winning, legacy = kinds
        self._kind = winning.kind
        self._groups = (winning.group, legacy.group)
        self._target = target
        self._on_shadowed = on_shadowed
        self._winning: dict[Key, SpecT] = {}
        self._legacy: dict[Key, SpecT] = {}
        self._warned: set[Key] = set()
        self.winning: Sink[SpecT] = Sink(self._store_winning, self._remove_winning)
        """For the reconciler of the winning group (``llm-d.ai``)."""
        self.legacy: Sink[SpecT] = Sink(self._store_legacy, self._remove_legacy)
        """For the reconciler of the legacy group (``inference.networking.x-k8s.io``)."""

    @property
    def shadowed(self) -> set[Key]:
        """(namespace, name) of the legacy objects a winning object hides right now."""
        return self._winning.keys() & self._legacy.keys()

    def _store_winning(self, spec: SpecT) -> None:
        key = (spec.namespace, spec.name)
        self._winning[key] = spec
        self._target.store(spec)
        if key in self._legacy:
            self._shadow(key)

    def _remove_winning(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self._winning.pop(key, None)
        legacy = self._legacy.get(key)
        if legacy is None:
            self._target.remove(namespace, name)
            return
        self._target.store(legacy)  # the legacy object comes out of the shadow
        self._count()

    def _store_legacy(self, spec: SpecT) -> None:
        key = (spec.namespace, spec.name)
        self._legacy[key] = spec
        if key in self._winning:
            self._shadow(key)
        else:
            self._target.store(spec)

    def _remove_legacy(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self._legacy.pop(key, None)
        if key in self._winning:
            self._count()
        else:
            self._target.remove(namespace, name)

    def _shadow(self, key: Key) -> None:
        if key not in self._warned:
            self._warned.add(key)
            winning, legacy = self._groups
            log.warning(
                "object exists in both API groups; the legacy one is ignored",
                extra={"kind": self._kind, "object": "/".join(key), "winning_group": winning, "ignored_group": legacy},
            )
        self._count()

    def _count(self) -> None:
        if self._on_shadowed is not None:
            self._on_shadowed(len(self.shadowed))
