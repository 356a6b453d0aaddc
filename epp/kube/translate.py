"""Kubernetes JSON objects → the plain values of :mod:`epp.datastore.types`. Pure; no I/O.

Reconcilers only translate: whether a pod is routable (Ready, not deleting, matching the
selector) is decided by the store from the :class:`PodInfo` built here. The filters that decide
which custom objects belong to our pool (``spec.poolRef`` name and group) live here too, so the
reconcilers hold no API-shape knowledge. A malformed object raises :class:`TranslationError`
naming the object and the field; the reconciler logs it and keeps its last good state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from epp.datastore.types import ModelSpec, ObjectiveSpec, PodInfo, PoolSpec, RewriteRule, RewriteSpec, TargetModel
from epp.kube.resources import V1_GROUP, V1ALPHA2_GROUP, pool_kind
from epp.labels import Selector, SelectorError, selector_from_object

__all__ = [
    "STANDALONE_DEFAULT_POOL_NAME",
    "TranslationError",
    "model_spec",
    "object_key",
    "objective_spec",
    "pod_info",
    "pool_spec",
    "rewrite_spec",
    "standalone_pool",
    "standalone_pool_name",
]

STANDALONE_DEFAULT_POOL_NAME = "standalone"
_DEPLOYMENT_POD_RE = re.compile(r"^(.+)-[a-z0-9]+-[a-z0-9]+$")
_CRITICALITIES = frozenset({"Critical", "Standard", "Sheddable"})
_MAX_WEIGHT = 1_000_000
_MAX_TARGET_PORTS = 8


class TranslationError(ValueError):
    """An object we cannot use; the message names the object and the offending field."""


def _map(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TranslationError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TranslationError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _str_map(value: Any, where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(value, where).items()}


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """``(namespace, name)`` of any object; raises if the name is missing."""
    meta = _map(obj.get("metadata"), "object metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise TranslationError(f"object without metadata.name: {dict(meta)!r}")
    return str(meta.get("namespace") or ""), name


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_map(obj.get("metadata"), "metadata").get("deletionTimestamp"))


def _created(obj: Mapping[str, Any], where: str) -> float:
    """``metadata.creationTimestamp`` (RFC 3339) as epoch seconds; 0 when absent."""
    stamp = _map(obj.get("metadata"), where).get("creationTimestamp")
    if not stamp:
        return 0.0
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise TranslationError(f"{where}: bad metadata.creationTimestamp {stamp!r}") from e


def _int(value: Any, where: str, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TranslationError(f"{where}: expected an integer, got {value!r}")
    if not low <= value <= high:
        raise TranslationError(f"{where}: {value} is outside {low}..{high}")
    return value


def pod_info(obj: Mapping[str, Any]) -> PodInfo:
    """A Pod → :class:`PodInfo`. Ready means a ``Ready`` condition with status ``True``."""
    namespace, name = object_key(obj)
    where = f"Pod {namespace}/{name}"
    meta = _map(obj.get("metadata"), where)
    status = _map(obj.get("status"), f"{where} status")
    ready = any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in _list(status.get("conditions"), f"{where} status.conditions")
    )
    return PodInfo(
        name=name,
        namespace=namespace,
        ip=str(status.get("podIP") or ""),
        labels=_str_map(meta.get("labels"), f"{where} metadata.labels"),
        annotations=_str_map(meta.get("annotations"), f"{where} metadata.annotations"),
        ready=ready,
        deleting=_deleting(obj),
    )


def _target_ports(numbers: list[Any], where: str) -> tuple[int, ...]:
    ports = tuple(_int(n, where, low=1, high=65535) for n in numbers)
    if not 1 <= len(ports) <= _MAX_TARGET_PORTS:
        raise TranslationError(f"{where}: need 1 to {_MAX_TARGET_PORTS} target ports, got {len(ports)}")
    if len(set(ports)) != len(ports):
        raise TranslationError(f"{where}: duplicate target ports {list(ports)}")
    return ports


def pool_spec(obj: Mapping[str, Any], *, group: str) -> PoolSpec:
    """An InferencePool of ``group`` (v1 ``inference.networking.k8s.io``, or v1alpha2) → PoolSpec."""
    namespace, name = object_key(obj)
    kind = pool_kind(group)
    where = f"InferencePool {namespace}/{name}"
    spec = _map(obj.get("spec"), f"{where} spec")
    try:
        selector = selector_from_object(_map(spec.get("selector"), f"{where} spec.selector"))
    except SelectorError as e:
        raise TranslationError(f"{where} spec.selector: {e}") from e
    if group == V1_GROUP:
        entries = _list(spec.get("targetPorts"), f"{where} spec.targetPorts")
        numbers = [_map(p, f"{where} spec.targetPorts[{i}]").get("number") for i, p in enumerate(entries)]
        ports = _target_ports(numbers, f"{where} spec.targetPorts")
    else:
        ports = _target_ports([spec.get("targetPortNumber")], f"{where} spec.targetPortNumber")
    app_protocol = str(spec.get("appProtocol") or "http")
    return PoolSpec(
        name=name,
        namespace=namespace,
        selector=selector,
        target_ports=ports,
        api_version=kind.group_version,
        app_protocol=app_protocol,
    )


def _pool_ref_matches(
    obj: Mapping[str, Any], where: str, *, pool_name: str, pool_group: str | None, default_group: str
) -> bool:
    ref = _map(_map(obj.get("spec"), f"{where} spec").get("poolRef"), f"{where} spec.poolRef")
    if ref.get("name") != pool_name:
        return False
    return pool_group is None or (ref.get("group") or default_group) == pool_group


def _target_models(entries: list[Any], where: str, *, name_field: str) -> tuple[TargetModel, ...]:
    targets: list[TargetModel] = []
    for i, entry in enumerate(entries):
        item = _map(entry, f"{where}[{i}]")
        target = item.get(name_field)
        if not isinstance(target, str) or not target:
            raise TranslationError(f"{where}[{i}].{name_field}: must be a non-empty string, got {target!r}")
        weight = item.get("weight")
        targets.append(
            TargetModel(
                name=target,
                weight=None if weight is None else _int(weight, f"{where}[{i}].weight", low=0, high=_MAX_WEIGHT),
            )
        )
    return tuple(targets)


def model_spec(obj: Mapping[str, Any], *, pool_name: str) -> ModelSpec | None:
    """A v1alpha2 InferenceModel → ModelSpec; None if it belongs to another pool or is deleting.

    As upstream v0.3, only ``spec.poolRef.name`` is compared.
    """
    namespace, name = object_key(obj)
    where = f"InferenceModel {namespace}/{name}"
    if _deleting(obj) or not _pool_ref_matches(
        obj, where, pool_name=pool_name, pool_group=None, default_group=V1ALPHA2_GROUP
    ):
        return None
    spec = _map(obj.get("spec"), f"{where} spec")
    model_name = spec.get("modelName")
    if not isinstance(model_name, str) or not model_name:
        raise TranslationError(f"{where} spec.modelName: must be a non-empty string, got {model_name!r}")
    criticality = spec.get("criticality")
    if criticality is not None and criticality not in _CRITICALITIES:
        raise TranslationError(f"{where} spec.criticality: {criticality!r} is not one of {sorted(_CRITICALITIES)}")
    return ModelSpec(
        name=name,
        namespace=namespace,
        model_name=model_name,
        criticality=criticality,
        target_models=_target_models(
            _list(spec.get("targetModels"), f"{where} spec.targetModels"),
            f"{where} spec.targetModels",
            name_field="name",
        ),
        created=_created(obj, where),
    )


def objective_spec(obj: Mapping[str, Any], *, pool_name: str, pool_group: str) -> ObjectiveSpec | None:
    """An InferenceObjective → ObjectiveSpec; None unless its poolRef names our pool and group."""
    namespace, name = object_key(obj)
    where = f"InferenceObjective {namespace}/{name}"
    if _deleting(obj) or not _pool_ref_matches(
        obj, where, pool_name=pool_name, pool_group=pool_group, default_group=V1_GROUP
    ):
        return None
    priority = _map(obj.get("spec"), f"{where} spec").get("priority")
    if priority is not None:
        priority = _int(priority, f"{where} spec.priority", low=-(2**31), high=2**31 - 1)
    return ObjectiveSpec(name=name, namespace=namespace, priority=priority)


def _rewrite_rule(rule: Any, where: str) -> RewriteRule:
    body = _map(rule, where)
    matches: list[str] = []
    for i, match in enumerate(_list(body.get("matches"), f"{where}.matches")):
        model = _map(_map(match, f"{where}.matches[{i}]").get("model"), f"{where}.matches[{i}].model")
        match_type = model.get("type") or "Exact"
        if match_type != "Exact":
            raise TranslationError(f"{where}.matches[{i}].model.type: unsupported match type {match_type!r}")
        value = model.get("value")
        if not isinstance(value, str) or not value:
            raise TranslationError(f"{where}.matches[{i}].model.value: must be a non-empty string, got {value!r}")
        matches.append(value)
    targets = _target_models(
        _list(body.get("targets"), f"{where}.targets"), f"{where}.targets", name_field="modelRewrite"
    )
    return RewriteRule(matches=tuple(matches), targets=targets)


def rewrite_spec(obj: Mapping[str, Any], *, pool_name: str, pool_group: str) -> RewriteSpec | None:
    """An InferenceModelRewrite → RewriteSpec; None unless its poolRef names our pool and group.

    A rule with no ``matches`` is generic (matches every model); precedence is applied later.
    """
    namespace, name = object_key(obj)
    where = f"InferenceModelRewrite {namespace}/{name}"
    if _deleting(obj) or not _pool_ref_matches(
        obj, where, pool_name=pool_name, pool_group=pool_group, default_group=V1_GROUP
    ):
        return None
    rules = _list(_map(obj.get("spec"), f"{where} spec").get("rules"), f"{where} spec.rules")
    return RewriteSpec(
        name=name,
        namespace=namespace,
        rules=tuple(_rewrite_rule(r, f"{where} spec.rules[{i}]") for i, r in enumerate(rules)),
        created=_created(obj, where),
    )


def standalone_pool_name(pod_name: str | None) -> str:
    """The Deployment name from ``POD_NAME`` (``<deploy>-<rs hash>-<suffix>``), else ``standalone``."""
    match = _DEPLOYMENT_POD_RE.match(pod_name or "")
    return match.group(1) if match else STANDALONE_DEFAULT_POOL_NAME


def standalone_pool(*, selector: Selector, target_ports: tuple[int, ...], namespace: str, pool_name: str) -> PoolSpec:
    """The pool synthesised from ``--endpoint-selector`` / ``--endpoint-target-ports``."""
    if selector.empty:
        raise TranslationError("--endpoint-selector: an empty selector would match every pod")
    ports = _target_ports(list(target_ports), "--endpoint-target-ports")
    return PoolSpec(
        name=pool_name,
        namespace=namespace,
        selector=selector,
        target_ports=ports,
        api_version=pool_kind(V1_GROUP).group_version,
    )
