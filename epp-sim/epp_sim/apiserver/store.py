"""The object store: every write, its invariants, and the in-process API controllers use.

Objects are plain JSON dicts kept per resource ``(group, plural)`` and ``(namespace, name)``.
A stored object is never mutated: each write commits a new dict, so events and list results
can share it. The store owns what the real API server guarantees: uid, creationTimestamp,
generation (bumped when anything but metadata and status changes), one rising
resourceVersion across all kinds, 409 on stale writes and duplicates, schema defaults,
pruning and validation (422), status and scale subresources, finalizers, graceful pod
deletion (MODIFIED with deletionTimestamp, then DELETED after the grace period), garbage
collection of dependents through ownerReferences, and namespace cascade.

With ``persistence`` (a :class:`~epp_sim.apiserver.persistence.DataDir`) the store starts from
the state it restores (objects as they were, the resourceVersion counter going on, CRD kinds
served again, pending pod grace periods resumed) and tells it about every committed write. The
watch history is not restored: a watch from a resourceVersion older than the restored counter
gets 410 Gone and must relist, as after an etcd compaction. Such a store must be built, and
written to, inside the running event loop its persistence writes from.

In-process API (what ``workloads.py`` and tests call)::

    store.create("Deployment", obj, namespace="ns")      # -> stored copy
    store.get("Pod", "name", namespace="ns")
    store.list("Pod", namespace="ns", label_selector="app=x", field_selector="status.phase=Running")
    store.update("Pod", obj, subresource="status")       # PUT semantics, 409 on stale resourceVersion
    store.patch("Deployment", "name", {"spec": {...}}, namespace="ns", patch_type=MERGE)
    store.delete("Pod", "name", namespace="ns", grace_period_seconds=5)
    async with store.subscribe("Pod", namespace="ns") as watch:   # ADDED for existing, then live
        async for event_type, event in watch: ...                 # event.object is read-only

Kinds are named as ``KindRegistry.resolve`` accepts (``Pod``, ``pods``, ``deployments.apps``).
Every failure raises ``ApiError`` with the Status the HTTP layer would send.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from epp.clock import Clock, SystemClock
from epp_sim.apiserver import crds
from epp_sim.apiserver import patch as patches
from epp_sim.apiserver.admission import (
    SYSTEM_META,
    admit,
    check_rv,
    copy_json,
    fresh,
    path_set,
    same,
    scale_of,
    spec_part,
    without_system_meta,
)
from epp_sim.apiserver.builtin_kinds import builtin_types
from epp_sim.apiserver.errors import ApiError, already_exists, conflict, invalid, not_found
from epp_sim.apiserver.kinds import KindRegistry, Obj, ResourceType
from epp_sim.apiserver.persistence import PersistenceError, Snapshot
from epp_sim.apiserver.queries import make_matcher
from epp_sim.apiserver.timefmt import parse_time, rfc3339
from epp_sim.apiserver.timers import GraceTimers
from epp_sim.apiserver.watch import Event, EventLog, Watch

__all__ = ["Persistence", "Store"]

Key = tuple[str, str]
_INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")


class Persistence(Protocol):
    """Where the store's state survives a restart (``persistence.DataDir``)."""

    @property
    def restored(self) -> Snapshot | None:
        """The state to start from; None for a fresh store."""
        ...

    @property
    def location(self) -> str:
        """Where the state is kept, for error messages."""
        ...

    def changed(self, take: Callable[[], Snapshot]) -> None:
        """A write was committed; ``take()`` gives the state to keep (cheap: it copies nothing)."""
        ...

    async def aclose(self, final: Snapshot) -> None:
        """Keep ``final`` and stop."""
        ...


class Store:
    """All objects of the fake API server, with the real server's write semantics."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        history_limit: int = 10_000,
        pod_grace_seconds: float = 0.0,
        seed: int = 0,
        persistence: Persistence | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.kinds = KindRegistry()
        self.events = EventLog(history_limit)
        self.pod_grace_seconds = pod_grace_seconds
        """Grace period for pod deletes that name none (real: terminationGracePeriodSeconds)."""
        self._rng = random.Random(seed)
        self._objects: dict[Key, dict[Key, Obj]] = {}
        self._grace = GraceTimers(self.clock)
        self._persistence = persistence
        for rt in builtin_types():
            self.kinds.add(rt)
        if persistence is not None and persistence.restored is not None:
            self._restore(persistence.restored, persistence.location)
            # uids and generated names must not repeat those issued before the restart
            self._rng.seed(f"{seed}/{persistence.restored.resource_version}")
        else:
            for ns in _INITIAL_NAMESPACES:
                self.create("Namespace", {"metadata": {"name": ns}})

    # ----------------------------------------------------------------------------------- reads

    @property
    def resource_version(self) -> int:
        return self.events.rv

    def type_of(self, kind: str | ResourceType) -> ResourceType:
        return kind if isinstance(kind, ResourceType) else self.kinds.resolve(kind)

    def lookup(self, rt: ResourceType, name: str, namespace: str | None) -> Obj | None:
        """The stored object (shared, read-only) or None."""
        return self._objects.get(rt.key, {}).get(((namespace or "") if rt.namespaced else "", name))

    def select(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        """Stored objects (shared, read-only) in key order, filtered by namespace and selectors."""
        match = make_matcher(label_selector, field_selector)
        bucket = self._objects.get(rt.key, {})
        return [
            bucket[k]
            for k in sorted(bucket)
            if (namespace is None or k[0] == namespace) and (match is None or match(bucket[k]))
        ]

    def get(self, kind: str | ResourceType, name: str, *, namespace: str | None = None) -> Obj:
        rt = self.type_of(kind)
        found = self.lookup(rt, name, namespace)
        if found is None:
            raise not_found(rt.plural, rt.group, name)
        return copy_json(found)

    def list(
        self,
        kind: str | ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        return [copy_json(o) for o in self.select(self.type_of(kind), namespace, label_selector, field_selector)]

    def subscribe(
        self,
        kind: str | ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: int | None = None,
        initial_events_end: bool = False,
    ) -> Watch:
        """A watch: from ``resource_version`` (410 if too old), or ADDED for every existing object first.

        With ``initial_events_end`` the initial ADDED events are followed by ``("BOOKMARK", event)``
        whose object carries the ``k8s.io/initial-events-end`` annotation: the initial state is complete.
        """
        rt = self.type_of(kind)
        match = make_matcher(label_selector, field_selector)
        initial = [Event("ADDED", rt, o, int(o["metadata"]["resourceVersion"])) for o in self.select(rt, namespace)]
        return self.events.subscribe(
            rt,
            since=resource_version,
            initial=initial,
            namespace=namespace,
            match=match,
            initial_events_end=initial_events_end,
        )

    # ---------------------------------------------------------------------------------- writes

    def create(
        self,
        kind: str | ResourceType,
        obj: Obj,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        strict: bool = False,
    ) -> Obj:
        rt = self.type_of(kind)
        new = fresh(rt, obj)
        meta = new["metadata"]
        ns = self._namespace(rt, meta, namespace)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise invalid(
                    rt.kind,
                    rt.group,
                    "",
                    [("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")],
                )
            meta["name"] = self._generated_name(rt, ns, str(meta["generateName"]))
        name = str(meta["name"])
        if self.lookup(rt, name, ns) is not None:
            raise already_exists(rt.plural, rt.group, name)
        if rt.namespaced and self.lookup(self.kinds.resolve("namespaces"), ns, None) is None:
            raise not_found("namespaces", "", ns)
        for k in (*SYSTEM_META, "resourceVersion"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = rfc3339(self.clock.wall())
        if rt.tracks_generation:
            meta["generation"] = 1
        if rt.status_subresource:
            new.pop("status", None)
        admit(rt, new, None, strict=strict)
        return self._commit(rt, "ADDED", new, None, dry_run=dry_run)

    def update(
        self,
        kind: str | ResourceType,
        obj: Obj,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        strict: bool = False,
    ) -> Obj:
        """PUT: replace the object (or only its status with ``subresource="status"``)."""
        rt = self.type_of(kind)
        new = fresh(rt, obj)
        ns = self._namespace(rt, new["metadata"], namespace)
        name = str(new["metadata"].get("name") or "")
        old = self.lookup(rt, name, ns)
        if old is None:
            raise not_found(rt.plural, rt.group, name)
        check_rv(rt, old, new)
        return self._replace(rt, old, new, subresource=subresource, dry_run=dry_run, strict=strict)

    def patch(
        self,
        kind: str | ResourceType,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        patch_type: str = patches.MERGE,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
        strict: bool = False,
    ) -> Obj:
        """PATCH with any of the four patch types; ``APPLY`` creates the object when missing."""
        rt = self.type_of(kind)
        ns = (namespace or "") if rt.namespaced else ""
        old = self.lookup(rt, name, ns)
        if patch_type == patches.APPLY:
            return self._apply(
                rt,
                name,
                ns,
                old,
                body,
                field_manager=field_manager,
                dry_run=dry_run,
                strict=strict,
                subresource=subresource,
            )
        if old is None:
            raise not_found(rt.plural, rt.group, name)
        base = scale_of(rt, old) if subresource == "scale" else copy_json(old)
        patched = patches.patch_object(base, body, patch_type, rt.schemas[rt.storage_version], strategic=rt.builtin)
        check_rv(rt, old, patched)
        if subresource == "scale":
            return self._scale_write(rt, old, patched, dry_run=dry_run)
        patched["metadata"]["name"], patched["metadata"]["resourceVersion"] = name, old["metadata"]["resourceVersion"]
        return self._replace(rt, old, patched, subresource=subresource, dry_run=dry_run, strict=strict)

    def delete(
        self,
        kind: str | ResourceType,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: float | None = None,
        preconditions: Mapping[str, Any] | None = None,
        propagation: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Delete now, or mark deleting (finalizers, pod grace period); returns the object."""
        rt = self.type_of(kind)
        old = self.lookup(rt, name, namespace if rt.namespaced else None)
        if old is None:
            raise not_found(rt.plural, rt.group, name)
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {old['metadata']['uid']}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt.plural,
                rt.group,
                name,
                "Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                f"{old['metadata']['resourceVersion']}",
            )
        if dry_run:
            return copy_json(old)
        return copy_json(self._delete(rt, old, grace_period_seconds, orphan=propagation == "Orphan"))

    def update_scale(
        self, kind: str | ResourceType, name: str, scale: Obj, *, namespace: str | None = None, dry_run: bool = False
    ) -> Obj:
        rt = self.type_of(kind)
        old = self.lookup(rt, name, namespace if rt.namespaced else None)
        if old is None:
            raise not_found(rt.plural, rt.group, name)
        check_rv(rt, old, scale)
        return self._scale_write(rt, old, scale, dry_run=dry_run)

    def compact(self) -> None:
        """Drop the watch history (tests force 410 Gone with this)."""
        self.events.compact()

    def snapshot(self) -> Snapshot:
        """The durable state: the resourceVersion counter and every object (shared, read-only)."""
        return Snapshot(
            self.events.rv,
            tuple((key, o) for key, bucket in self._objects.items() for o in bucket.values()),
        )

    async def aclose(self) -> None:
        """Cancel pending grace-period timers, end every watch, and keep the final state."""
        await self._grace.aclose()
        self.events.close_watches()
        persistence, self._persistence = self._persistence, None
        if persistence is not None:
            await persistence.aclose(self.snapshot())

    # ------------------------------------------------------------------------------- internals

    def _restore(self, snapshot: Snapshot, location: str) -> None:
        """Take a persisted state as is: CRDs first (they serve the kinds of the rest), no history."""
        self.events.restore(snapshot.resource_version)
        for key, o in sorted(snapshot.objects, key=lambda entry: entry[0] != _CRD_KEY):
            rt = self.kinds.get(key)
            meta = o["metadata"]
            where = f"{location}: {'.'.join(k for k in reversed(key) if k)} {meta['name']}"
            if rt is None:
                raise PersistenceError(f"{where}: the resource is not served (its CustomResourceDefinition is missing)")
            if rt.namespaced != bool(meta.get("namespace")):
                raise PersistenceError(f"{where}: metadata.namespace does not fit the resource's scope")
            self._objects.setdefault(key, {})[(meta.get("namespace", ""), meta["name"])] = o
            if key == _CRD_KEY:
                try:
                    self._serve_crd(o, None)
                except (KeyError, TypeError, ValueError, ApiError) as e:
                    raise PersistenceError(f"{where}: not a servable CustomResourceDefinition: {e}") from e
            self._resume_grace(rt, o)

    def _resume_grace(self, rt: ResourceType, o: Obj) -> None:
        """A restored pod in its grace period is removed when the period ends, as before the restart."""
        meta = o["metadata"]
        due = parse_time(str(meta.get("deletionTimestamp") or ""))
        if rt.key == ("", "pods") and due is not None and int(meta.get("deletionGracePeriodSeconds") or 0) > 0:
            name = f"{meta.get('namespace', '')}/{meta['name']}"
            self._grace.start(meta["uid"], name, max(0.0, due - self.clock.wall()), lambda: self._grace_expired(rt, o))

    def _changed(self) -> None:
        if self._persistence is not None:
            self._persistence.changed(self.snapshot)

    def _namespace(self, rt: ResourceType, meta: Obj, namespace: str | None) -> str:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return ""
        given = meta.get("namespace")
        if namespace and given and given != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        ns = str(namespace or given or "default")
        meta["namespace"] = ns
        return ns

    def _generated_name(self, rt: ResourceType, ns: str, prefix: str) -> str:
        while True:
            name = prefix + "".join(self._rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            if self.lookup(rt, name, ns) is None:
                return name

    def _replace(
        self, rt: ResourceType, old: Obj, new: Obj, *, subresource: str | None, dry_run: bool, strict: bool
    ) -> Obj:
        old_meta = old["metadata"]
        if subresource == "status":
            status = new.get("status")
            new = copy_json(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif subresource is not None:
            raise not_found(f"{rt.plural}/{subresource}", rt.group, old_meta["name"])
        elif rt.status_subresource:
            if "status" in old:
                new["status"] = copy_json(old["status"])
            else:
                new.pop("status", None)
        meta = new["metadata"]
        for k in SYSTEM_META:
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta["name"], meta["resourceVersion"] = old_meta["name"], old_meta["resourceVersion"]
        if rt.namespaced:
            meta["namespace"] = old_meta["namespace"]
        admit(rt, new, old, strict=strict)
        if rt.tracks_generation and spec_part(rt, new) != spec_part(rt, old):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        if same(new, old):
            return copy_json(old)
        if (
            old_meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not self._grace.pending(old_meta["uid"])
        ):
            return self._remove(rt, new, dry_run=dry_run)
        return self._commit(rt, "MODIFIED", new, old, dry_run=dry_run)

    def _apply(
        self,
        rt: ResourceType,
        name: str,
        ns: str,
        old: Obj | None,
        body: Any,
        *,
        field_manager: str | None,
        dry_run: bool,
        strict: bool,
        subresource: str | None,
    ) -> Obj:
        if not field_manager:
            raise ApiError(400, "BadRequest", "PATCH, application/apply-patch+yaml requires fieldManager to be set")
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the apply body must be an object")
        applied = fresh(rt, body)
        if applied["metadata"].get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        applied["metadata"]["name"] = name
        schema = rt.schemas.get(str(applied["apiVersion"]).rpartition("/")[2]) or rt.schemas[rt.storage_version]
        fields = patches.apply_fields(applied, schema)
        entry = {
            "manager": field_manager,
            "operation": "Apply",
            "apiVersion": applied["apiVersion"],
            "time": rfc3339(self.clock.wall()),
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
        if subresource == "status":
            entry["subresource"] = "status"
        if old is None:
            if subresource is not None:
                raise not_found(rt.plural, rt.group, name)
            applied["metadata"]["managedFields"] = [entry]
            return self.create(rt, applied, namespace=ns or None, dry_run=dry_run, strict=strict)
        check_rv(rt, old, applied)
        merged = patches.server_side_apply(copy_json(old), without_system_meta(applied), entry, schema)
        return self._replace(rt, old, merged, subresource=subresource, dry_run=dry_run, strict=strict)

    def _scale_write(self, rt: ResourceType, old: Obj, scale: Obj, *, dry_run: bool) -> Obj:
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid(
                "Scale",
                "autoscaling",
                old["metadata"]["name"],
                [
                    (
                        "spec.replicas",
                        "FieldValueInvalid",
                        f"Invalid value: {replicas!r}: must be greater than or equal to 0",
                    )
                ],
            )
        assert rt.scale is not None
        new = copy_json(old)
        path_set(new, rt.scale.spec_replicas_path, replicas)
        stored = self._replace(rt, old, new, subresource=None, dry_run=dry_run, strict=False)
        return scale_of(rt, stored)

    def _commit(self, rt: ResourceType, event_type: str, new: Obj, old: Obj | None, *, dry_run: bool) -> Obj:
        if dry_run:
            return new
        rv = self.events.next_rv()
        new["metadata"]["resourceVersion"] = str(rv)
        meta = new["metadata"]
        self._objects.setdefault(rt.key, {})[(meta.get("namespace", "") if rt.namespaced else "", meta["name"])] = new
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._serve_crd(new, old)
        self.events.append(Event(event_type, rt, new, rv, old))
        self._changed()
        return copy_json(new)

    def _delete(self, rt: ResourceType, old: Obj, grace: float | None, *, orphan: bool = False) -> Obj:
        meta = old["metadata"]
        is_pod = rt.key == ("", "pods")
        grace = (self.pod_grace_seconds if grace is None else grace) if is_pod else 0
        if meta.get("deletionTimestamp"):
            if is_pod and grace == 0 and not meta.get("finalizers"):
                self._grace.cancel(meta["uid"])
                return self._remove(rt, old, dry_run=False, orphan=orphan)
            return old
        if not meta.get("finalizers") and grace <= 0:
            return self._remove(rt, old, dry_run=False, orphan=orphan)
        new = copy_json(old)
        new["metadata"]["deletionTimestamp"] = rfc3339(self.clock.wall() + grace)
        new["metadata"]["deletionGracePeriodSeconds"] = int(grace)
        if grace > 0:
            name = f"{meta.get('namespace', '')}/{meta['name']}"
            self._grace.start(meta["uid"], name, grace, lambda: self._grace_expired(rt, new))
        return self._commit(rt, "MODIFIED", new, old, dry_run=False)

    def _grace_expired(self, rt: ResourceType, o: Obj) -> None:
        meta = o["metadata"]
        current = self.lookup(rt, meta["name"], meta.get("namespace"))
        if (
            current is not None
            and current["metadata"]["uid"] == meta["uid"]
            and not current["metadata"].get("finalizers")
        ):
            self._remove(rt, current, dry_run=False)

    def _remove(self, rt: ResourceType, o: Obj, *, dry_run: bool, orphan: bool = False) -> Obj:
        if dry_run:
            return o
        meta = o["metadata"]
        if rt.key == ("", "namespaces"):
            for other in self.kinds:
                if other.namespaced:
                    for child in self.select(other, meta["name"]):
                        self._remove(other, child, dry_run=False)
        gone = copy_json(o)
        rv = self.events.next_rv()
        gone["metadata"]["resourceVersion"] = str(rv)
        self._objects.get(rt.key, {}).pop((meta.get("namespace", "") if rt.namespaced else "", meta["name"]), None)
        self._grace.cancel(meta["uid"])
        self.events.append(Event("DELETED", rt, gone, rv, o))
        self._changed()
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._unserve_crd(o)
        if not orphan:
            self._collect_dependents(meta["uid"])
        return gone

    def _collect_dependents(self, uid: str) -> None:
        for rt in self.kinds:
            for o in list(self._objects.get(rt.key, {}).values()):
                owners = o["metadata"].get("ownerReferences") or []
                if any(isinstance(ref, dict) and ref.get("uid") == uid for ref in owners):
                    current = self.lookup(rt, o["metadata"]["name"], o["metadata"].get("namespace"))
                    if current is not None:
                        self._delete(rt, current, None)

    def _serve_crd(self, crd: Obj, old: Obj | None) -> None:
        rt = crds.resource_type(crd)
        if old is not None:
            previous = crds.resource_type(old)
            if previous.key != rt.key:
                self.kinds.remove(previous.key)
        self.kinds.add(rt)

    def _unserve_crd(self, crd: Obj) -> None:
        rt = crds.resource_type(crd)
        for o in self.select(rt, None):
            self._remove(rt, o, dry_run=False, orphan=True)
        self.events.close_watches(rt.key)
        self.kinds.remove(rt.key)
        self._objects.pop(rt.key, None)
