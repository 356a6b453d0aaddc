"""The saturation ConfigMap (``wva-saturation-scaling-config``), upstream WVA v0.9's schema, parsed strictly.

One YAML document per ``data`` key. ``default`` holds the defaults; every other key is an
override, keyed ``"{modelID}#{namespace}"`` (upstream #994; the inner ``model_id`` / ``namespace``
are informational and must agree) or, as ours always allowed, any key whose entry names a
``namespace`` (namespace-wide) and optionally a ``model_id``.

Fields: V1's ``kvCacheThreshold`` / ``queueLengthThreshold`` / ``kvSpareTrigger`` /
``queueSpareTrigger``; V2's ``scaleUpThreshold`` / ``scaleDownBoundary``; ``priority``; the
analyzer selection — ``analyzers:`` (the ScalingPolicy envelope, #1245/#1486: ``type`` or
``name``, ``enabled``, ``score``, ``scaleUpThreshold``, ``scaleDownBoundary``, ``parameters`` whose
well-known keys fold into those fields) or the older ``analyzerName: saturation``; an inline
``scaleToZero: {enabled}``; and, on the global ``default`` entry only, ``enableLimiter``,
``limiters:`` (the quota limiter) and ``enableRescale``.

A config with an analyzer list (or ``analyzerName: saturation``) runs the V2 pipeline, the
default since v0.9; without one it runs V1 (remove ``analyzers`` to opt out, as upstream). With no
ConfigMap at all the shipped defaults apply, which select V2 like upstream's shipped map.

Stricter than upstream, on purpose: an unknown key, an unknown analyzer type or a setting placed
where it has no effect is an error naming the key, field and value (upstream logs and skips the
entry, or silently ignores the field), and overrides are validated merged onto the default.
Refused by name, with the reason in the error: ``enableRescale: true`` (priority-weighted
rescaling, which upstream ships off), a ``gpu-inventory`` limiter and ``enableLimiter: true``
without a quota limiter (both need physical GPU discovery from Nodes), and the
``queueing-model`` analyzer (upstream refuses it too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from epp.autoscale.quota import QuotaError, QuotaLimiter, parse_quota_limiters
from epp.framework.saturation import Thresholds

__all__ = [
    "ANALYZERS",
    "SATURATION_CONFIGMAP",
    "AnalyzerSpec",
    "ConfigError",
    "SaturationConfig",
    "SaturationConfigMap",
    "load_yaml_entry",
    "parse_saturation_configmap",
    "validation_message",
]

SATURATION_CONFIGMAP = "wva-saturation-scaling-config"
SATURATION = "saturation"
THROUGHPUT = "throughput"
ANALYZERS = (SATURATION, THROUGHPUT)
DEFAULT_KEY = "default"
_SHARED = Thresholds()  # the picker's notion of "saturated" is the autoscaler's default too


class ConfigError(ValueError):
    """A ConfigMap entry that cannot be used; the message names the map, key, field and value."""


@dataclass(frozen=True, slots=True)
class AnalyzerSpec:
    """One entry of ``analyzers:``; thresholds left None use the model's."""

    name: str
    enabled: bool = True
    score: float = 1.0
    scale_up_threshold: float | None = None
    scale_down_boundary: float | None = None


@dataclass(frozen=True, slots=True)
class SaturationConfig:
    """The resolved settings of one model group; validated when built (errors name upstream's keys)."""

    kv_cache_threshold: float = _SHARED.kv_cache_util
    queue_length_threshold: float = float(_SHARED.queue_depth)
    kv_spare_trigger: float = 0.10
    queue_spare_trigger: float = 3.0
    scale_up_threshold: float = 0.85
    scale_down_boundary: float = 0.70
    priority: float = 1.0
    analyzers: tuple[AnalyzerSpec, ...] = (AnalyzerSpec(SATURATION),)
    scale_to_zero: bool | None = None

    def __post_init__(self) -> None:
        checks = (
            (
                0.0 <= self.kv_cache_threshold <= 1.0,
                f"kvCacheThreshold must be in [0, 1], got {self.kv_cache_threshold}",
            ),
            (self.queue_length_threshold >= 0, f"queueLengthThreshold must be >= 0, got {self.queue_length_threshold}"),
            (0.0 <= self.kv_spare_trigger <= 1.0, f"kvSpareTrigger must be in [0, 1], got {self.kv_spare_trigger}"),
            (self.queue_spare_trigger >= 0, f"queueSpareTrigger must be >= 0, got {self.queue_spare_trigger}"),
            (
                self.kv_cache_threshold >= self.kv_spare_trigger,
                f"kvCacheThreshold ({self.kv_cache_threshold}) must be >= kvSpareTrigger ({self.kv_spare_trigger})",
            ),
            (self.priority >= 0, f"priority must be >= 0, got {self.priority}"),
        )
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        _check_pair("", self.scale_up_threshold, self.scale_down_boundary)
        for a in self.analyzers:
            _check_pair(
                f"analyzer {a.name!r}: ",
                a.scale_up_threshold if a.scale_up_threshold is not None else self.scale_up_threshold,
                a.scale_down_boundary if a.scale_down_boundary is not None else self.scale_down_boundary,
            )
            if a.score < 0:
                raise ValueError(f"analyzer {a.name!r}: score must be >= 0, got {a.score}")

    @property
    def v2(self) -> bool:
        """True: the V2 pipeline (analyzer list); False: the V1 percentage analyzer."""
        return bool(self.analyzers)

    def analyzer(self, name: str) -> AnalyzerSpec | None:
        return next((a for a in self.analyzers if a.name == name), None)

    def thresholds(self, name: str) -> tuple[float, float]:
        """``(scaleUpThreshold, scaleDownBoundary)`` for an analyzer: its own, else the model's."""
        a = self.analyzer(name)
        up = a.scale_up_threshold if a is not None and a.scale_up_threshold is not None else self.scale_up_threshold
        down = self.scale_down_boundary
        if a is not None and a.scale_down_boundary is not None:
            down = a.scale_down_boundary
        return up, down

    @classmethod
    def from_thresholds(cls, t: Thresholds, **settings: Any) -> SaturationConfig:
        """Share the picker's notion of "saturated" (queue depth, KV use); the rest are ours."""
        return cls(kv_cache_threshold=t.kv_cache_util, queue_length_threshold=float(t.queue_depth), **settings)


def _check_pair(prefix: str, up: float, down: float) -> None:
    if not 0.0 < up <= 1.0:
        raise ValueError(f"{prefix}scaleUpThreshold must be in (0, 1], got {up}")
    if not 0.0 < down <= 1.0:
        raise ValueError(f"{prefix}scaleDownBoundary must be in (0, 1], got {down}")
    if up <= down:
        raise ValueError(f"{prefix}scaleUpThreshold ({up}) must be > scaleDownBoundary ({down})")


class _AnalyzerEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    type: str | None = None
    name: str | None = None
    enabled: bool | None = None
    score: float | None = None
    scale_up_threshold: float | None = Field(None, alias="scaleUpThreshold")
    scale_down_boundary: float | None = Field(None, alias="scaleDownBoundary")
    parameters: dict[str, Any] | None = None

    def spec(self, where: str) -> AnalyzerSpec:
        """Fold ``parameters`` into the typed fields (an explicit field wins), upstream's ``Normalize``."""
        kind = self.type or self.name or ""
        if kind == "queueing-model":
            raise ConfigError(f"{where}: analyzer 'queueing-model' is not supported (upstream refuses it too)")
        if kind not in ANALYZERS:
            raise ConfigError(f"{where}: unknown analyzer type {kind!r} (known: {', '.join(ANALYZERS)})")
        params = dict(self.parameters or {})
        unknown = sorted(set(params) - {"scaleUpThreshold", "scaleDownBoundary", "score", "enabled"})
        if unknown:
            raise ConfigError(f"{where}: analyzer {kind!r}: unknown parameter(s) {', '.join(unknown)}")

        def number(key: str, explicit: float | None) -> float | None:
            if explicit is not None or key not in params:
                return explicit
            value = params[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{where}: analyzer {kind!r}: parameter {key}={value!r} must be a number")
            return float(value)

        enabled = self.enabled
        if enabled is None and "enabled" in params:
            if not isinstance(params["enabled"], bool):
                raise ConfigError(
                    f"{where}: analyzer {kind!r}: parameter enabled={params['enabled']!r} must be a boolean"
                )
            enabled = params["enabled"]
        score = number("score", self.score if self.score else None)
        return AnalyzerSpec(
            name=kind,
            enabled=True if enabled is None else enabled,
            score=score if score else 1.0,
            scale_up_threshold=number("scaleUpThreshold", self.scale_up_threshold),
            scale_down_boundary=number("scaleDownBoundary", self.scale_down_boundary),
        )


class _ScaleToZeroEnvelope(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool | None = None


class _SaturationEntry(BaseModel):
    """One ``data`` entry as written (camelCase, upstream keys); None: the entry does not set it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    kv_cache_threshold: float | None = Field(None, alias="kvCacheThreshold")
    queue_length_threshold: float | None = Field(None, alias="queueLengthThreshold")
    kv_spare_trigger: float | None = Field(None, alias="kvSpareTrigger")
    queue_spare_trigger: float | None = Field(None, alias="queueSpareTrigger")
    scale_up_threshold: float | None = Field(None, alias="scaleUpThreshold")
    scale_down_boundary: float | None = Field(None, alias="scaleDownBoundary")
    priority: float | None = None
    analyzer_name: str | None = Field(None, alias="analyzerName")
    analyzers: list[_AnalyzerEntry] | None = None
    scale_to_zero: _ScaleToZeroEnvelope | None = Field(None, alias="scaleToZero")
    enable_limiter: bool | None = Field(None, alias="enableLimiter")
    enable_rescale: bool | None = Field(None, alias="enableRescale")
    limiters: list[dict[str, Any]] | None = None
    model_id: str | None = None
    namespace: str | None = None

    def changes(self, where: str) -> dict[str, Any]:
        """The :class:`SaturationConfig` fields this entry sets."""
        out: dict[str, Any] = {}
        for f in fields(SaturationConfig):
            value = getattr(self, f.name, None)
            if f.name not in ("analyzers", "scale_to_zero") and value is not None:
                out[f.name] = float(value)
        if self.analyzers is not None:
            out["analyzers"] = tuple(a.spec(f"{where} analyzers[{i}]") for i, a in enumerate(self.analyzers))
        elif self.analyzer_name == SATURATION:
            out["analyzers"] = (AnalyzerSpec(SATURATION),)
        elif self.analyzer_name is not None and self.analyzer_name not in ("", "v1"):
            raise ConfigError(f"{where}: analyzerName={self.analyzer_name!r}: use 'saturation' (V2) or omit it (V1)")
        if self.scale_to_zero is not None and self.scale_to_zero.enabled is not None:
            out["scale_to_zero"] = self.scale_to_zero.enabled
        return out


@dataclass(frozen=True, slots=True)
class SaturationConfigMap:
    """A parsed saturation ConfigMap: default changes, overrides, and the global-only limiter settings."""

    default: Mapping[str, Any] | None = None
    """Fields the ``default`` entry sets; None: no ``default`` entry."""
    namespace_wide: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """namespace → fields, from entries naming a namespace and no model."""
    per_model: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    """(namespace, model) → fields."""
    enable_limiter: bool = False
    limiters: tuple[QuotaLimiter, ...] = ()

    def base(self, shipped: SaturationConfig) -> SaturationConfig:
        """What the default entry makes of ``shipped``: V1 when it selects no analyzer (upstream opt-out)."""
        if self.default is None:
            return shipped
        changes = dict(self.default)
        changes.setdefault("analyzers", ())
        return replace(shipped, **changes)


def load_yaml_entry(where: str, text: str) -> Mapping[str, Any]:
    """One ``data`` value as a mapping of fields (empty text: no fields)."""
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {e}") from e
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: expected a mapping of fields, got {type(doc).__name__}")
    return doc


def validation_message(where: str, err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(entry)"
        parts.append(f"{loc}={e.get('input')!r}: {e['msg']}")
    return f"{where}: " + "; ".join(parts)


def _merged(where: str, base: SaturationConfig, changes: Mapping[str, Any]) -> SaturationConfig:
    try:
        return replace(base, **changes)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from e


def _global_settings(where: str, key: str, entry: _SaturationEntry, *, local: bool) -> None:
    """Refuse what upstream does not ship on, and budget settings where they would have no effect."""
    if entry.enable_rescale:
        raise ConfigError(
            f"{where}: enableRescale=true: priority-weighted rescaling is not supported by epp autoscale "
            "(upstream ships it off)"
        )
    placed = [n for n, v in (("enableLimiter", entry.enable_limiter), ("limiters", entry.limiters)) if v]
    if placed and (key != DEFAULT_KEY or local):
        scope = "the global ConfigMap's default entry"
        raise ConfigError(f"{where}: {', '.join(placed)} is honoured only on {scope}")
    for i, limiter in enumerate(entry.limiters or ()):
        if limiter.get("type") in ("gpu-inventory", "inventory"):
            raise ConfigError(
                f"{where}: limiters[{i}] type={limiter.get('type')!r}: the GPU-inventory limiter needs GPU "
                "discovery from Nodes, which epp autoscale does not do; declare a quota limiter"
            )
    if entry.enable_limiter and not entry.limiters:
        raise ConfigError(
            f"{where}: enableLimiter=true without a quota limiter: the GPU-inventory limiter (upstream's default) "
            "is not supported; add limiters: [{type: quota, ...}]"
        )


def _scope(where: str, key: str, entry: _SaturationEntry) -> tuple[str, str | None]:
    """``(namespace, model or None)`` an override applies to."""
    if "#" in key:
        model, _, namespace = key.rpartition("#")
        if not model or not namespace:
            raise ConfigError(f"{where}: an override key must be '{{modelID}}#{{namespace}}'")
        for name, inner, outer in (("model_id", entry.model_id, model), ("namespace", entry.namespace, namespace)):
            if inner is not None and inner != outer:
                raise ConfigError(f"{where}: {name}={inner!r} disagrees with the key ({outer!r})")
        return namespace, model
    if not entry.namespace:
        raise ConfigError(f"{where}: an override entry needs a '{{modelID}}#{{namespace}}' key or a namespace")
    return entry.namespace, entry.model_id


def parse_saturation_configmap(
    data: Mapping[str, str],
    *,
    source: str = SATURATION_CONFIGMAP,
    local: bool = False,
    shipped: SaturationConfig | None = None,
) -> SaturationConfigMap:
    """Parse and validate every entry; the first invalid one raises :class:`ConfigError`.

    ``local``: a namespace-local map (no budget settings). Each override is validated merged
    onto the default, so a partial override that contradicts an inherited value fails here.
    """
    entries: dict[str, _SaturationEntry] = {}
    for key in sorted(data):
        where = f"ConfigMap {source} key {key!r}"
        try:
            entries[key] = _SaturationEntry.model_validate(load_yaml_entry(where, data[key]))
        except ValidationError as e:
            raise ConfigError(validation_message(where, e)) from e
        _global_settings(where, key, entries[key], local=local)
    default_entry = entries.pop(DEFAULT_KEY, None)
    where = f"ConfigMap {source} key 'default'"
    if default_entry is not None and (default_entry.model_id or default_entry.namespace):
        raise ConfigError(f"{where}: the default entry must not set model_id or namespace")
    limiters: tuple[QuotaLimiter, ...] = ()
    if default_entry is not None and default_entry.limiters:
        try:
            limiters = parse_quota_limiters(default_entry.limiters)
        except QuotaError as e:
            raise ConfigError(f"{where}: {e}") from e
    parsed = SaturationConfigMap(
        default=default_entry.changes(where) if default_entry is not None else None,
        enable_limiter=bool(default_entry and default_entry.enable_limiter),
        limiters=limiters,
    )
    try:
        base = parsed.base(shipped or SaturationConfig())
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from e
    wide: dict[str, Mapping[str, Any]] = {}
    per_model: dict[tuple[str, str], Mapping[str, Any]] = {}
    for key, entry in entries.items():
        where = f"ConfigMap {source} key {key!r}"
        namespace, model = _scope(where, key, entry)
        changes = entry.changes(where)
        _merged(f"{where} (merged onto default)", base, changes)
        if model is None:
            wide.setdefault(namespace, changes)  # sorted keys: the first wins, as upstream's duplicates
        else:
            per_model.setdefault((namespace, model), changes)
    return replace(parsed, namespace_wide=wide, per_model=per_model)
