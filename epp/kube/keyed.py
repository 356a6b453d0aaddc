"""The shared shape of the objective, model and rewrite reconcilers: named objects → store.

Each of those kinds is a set of namespaced objects, filtered by ``spec.poolRef``, that the store
keeps by name. The translate function returns ``None`` for objects that are not ours (another
pool, or being deleted); this class turns events and relists into the minimal ``store``/``remove``
calls and keeps the last good value when an object cannot be read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from epp.kube.client import JsonObject
from epp.kube.translate import TranslationError, object_key

__all__ = ["KeyedReconciler"]

log = logging.getLogger(__name__)

SpecT = TypeVar("SpecT")


class KeyedReconciler(Generic[SpecT]):
    """Informer handler for one kind of pool-scoped named object."""

    def __init__(
        self,
        *,
        kind: str,
        translate: Callable[[JsonObject], SpecT | None],
        store: Callable[[SpecT], None],
        remove: Callable[[str, str], None],
    ) -> None:
        self._kind = kind
        self._translate = translate
        self._store = store
        self._remove = remove
        self._specs: dict[tuple[str, str], SpecT] = {}

    @property
    def specs(self) -> dict[tuple[str, str], SpecT]:
        """What the store holds from this reconciler, by (namespace, name)."""
        return dict(self._specs)

    def resync(self, objects: Sequence[JsonObject]) -> None:
        seen: set[tuple[str, str]] = set()
        for obj in objects:
            key = self._key(obj)
            if key is None:
                continue
            seen.add(key)
            self.apply("MODIFIED", obj)
        for key in [k for k in self._specs if k not in seen]:
            del self._specs[key]
            self._remove(*key)

    def apply(self, event: str, obj: JsonObject) -> None:
        key = self._key(obj)
        if key is None:
            return
        spec: SpecT | None = None
        if event != "DELETED":
            try:
                spec = self._translate(obj)
            except TranslationError as e:
                log.warning(
                    "ignoring unreadable object; keeping the last good one",
                    extra={"kind": self._kind, "error": str(e)},
                )
                return
        if spec is None:
            if self._specs.pop(key, None) is not None:
                self._remove(*key)
            return
        if self._specs.get(key) != spec:
            self._specs[key] = spec
            self._store(spec)

    def replay(self) -> None:
        """Store everything again (after the pool came back and the store was cleared)."""
        for spec in self._specs.values():
            self._store(spec)

    def _key(self, obj: JsonObject) -> tuple[str, str] | None:
        try:
            return object_key(obj)
        except TranslationError as e:
            log.warning("ignoring object without a name", extra={"kind": self._kind, "error": str(e)})
            return None
