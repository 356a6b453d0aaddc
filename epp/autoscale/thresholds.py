"""Saturation thresholds and scale-to-zero settings: the upstream ConfigMap formats, resolved per model.

Two ConfigMaps, both in WVA's format (one YAML document per ``data`` key):

- ``wva-saturation-scaling-config``: a ``default`` entry (``kvCacheThreshold``,
  ``queueLengthThreshold``, ``kvSpareTrigger``, ``queueSpareTrigger``) plus override entries that
  name a ``namespace`` and optionally a ``model_id``;
- ``wva-model-scale-to-zero-config``: ``enable_scale_to_zero`` (tri-state) and
  ``retention_period`` (Go duration) under ``default`` and per ``model_id``.

A ConfigMap of the same name in a workload namespace replaces the global one for that namespace
(upstream's namespace-local maps). Unlike upstream HEAD, overrides are applied (default <
namespace-wide entry < namespace+model entry, field by field, only fields the entry sets) and the
merged result is validated; and a missing ``default`` falls back to the shipped defaults instead
of skipping the model. Parsing is strict: an unknown key or out-of-range value raises
:class:`ConfigError` naming the ConfigMap key, the field and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from epp.autoscale.types import ModelKey
from epp.durations import parse_duration
from epp.framework.saturation import Thresholds

__all__ = [
    "DEFAULT_RETENTION_SECONDS",
    "SATURATION_CONFIGMAP",
    "SCALE_TO_ZERO_CONFIGMAP",
    "ConfigError",
    "SaturationConfig",
    "SaturationConfigMap",
    "ScaleToZeroConfigMap",
    "ScaleToZeroSetting",
    "ThresholdResolver",
    "parse_saturation_configmap",
    "parse_scale_to_zero_configmap",
]

SATURATION_CONFIGMAP = "wva-saturation-scaling-config"
SCALE_TO_ZERO_CONFIGMAP = "wva-model-scale-to-zero-config"
DEFAULT_RETENTION_SECONDS = 600.0
_DEFAULT_KEY = "default"


class ConfigError(ValueError):
    """A ConfigMap entry that cannot be used; the message names the map, key, field and value."""


# The picker's admission and this autoscaler call a replica saturated at the same point by default:
# one definition, in epp.framework.saturation.
_SHARED = Thresholds()


@dataclass(frozen=True, slots=True)
class SaturationConfig:
    """V1 saturation parameters. Saturated at ``>=`` a threshold; scale up at spare ``<`` a trigger."""

    kv_cache_threshold: float = _SHARED.kv_cache_util
    queue_length_threshold: float = float(_SHARED.queue_depth)
    kv_spare_trigger: float = 0.10
    queue_spare_trigger: float = 3.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.kv_cache_threshold <= 1.0:
            raise ValueError(f"kvCacheThreshold must be in [0, 1], got {self.kv_cache_threshold}")
        if self.queue_length_threshold < 0:
            raise ValueError(f"queueLengthThreshold must be >= 0, got {self.queue_length_threshold}")
        if not 0.0 <= self.kv_spare_trigger <= 1.0:
            raise ValueError(f"kvSpareTrigger must be in [0, 1], got {self.kv_spare_trigger}")
        if self.queue_spare_trigger < 0:
            raise ValueError(f"queueSpareTrigger must be >= 0, got {self.queue_spare_trigger}")
        if self.kv_cache_threshold < self.kv_spare_trigger:
            raise ValueError(
                f"kvCacheThreshold ({self.kv_cache_threshold}) must be >= kvSpareTrigger ({self.kv_spare_trigger})"
            )

    @classmethod
    def from_thresholds(cls, t: Thresholds, **triggers: float) -> SaturationConfig:
        """Share the picker's notion of "saturated" (queue depth, KV use); spare triggers are ours."""
        return cls(kv_cache_threshold=t.kv_cache_util, queue_length_threshold=float(t.queue_depth), **triggers)


class _SaturationEntry(BaseModel):
    """One ``data`` entry of the saturation ConfigMap, as written (camelCase, upstream keys)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    kv_cache_threshold: float | None = Field(None, alias="kvCacheThreshold")
    queue_length_threshold: float | None = Field(None, alias="queueLengthThreshold")
    kv_spare_trigger: float | None = Field(None, alias="kvSpareTrigger")
    queue_spare_trigger: float | None = Field(None, alias="queueSpareTrigger")
    enable_limiter: bool = Field(False, alias="enableLimiter")
    analyzer_name: str = Field("", alias="analyzerName")
    # V2 analyzer knobs: accepted so upstream maps load; the V1 analysis does not use them.
    scale_up_threshold: float | None = Field(None, alias="scaleUpThreshold")
    scale_down_boundary: float | None = Field(None, alias="scaleDownBoundary")
    model_id: str | None = None
    namespace: str | None = None

    def overlay(self, base: SaturationConfig) -> dict[str, float]:
        """The fields of ``base`` with this entry's explicitly set values on top."""
        fields = _fields(base)
        for name in fields:
            value = getattr(self, name)
            if value is not None:
                fields[name] = float(value)
        return fields


@dataclass(frozen=True, slots=True)
class SaturationConfigMap:
    """A parsed saturation ConfigMap: its default entry and overrides (by ConfigMap key)."""

    default: _SaturationEntry | None = None
    overrides: Mapping[str, _SaturationEntry] = field(default_factory=dict)


def _load_yaml(where: str, text: str) -> Mapping[str, Any]:
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {e}") from e
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: expected a mapping of fields, got {type(doc).__name__}")
    return doc


def _validation_message(where: str, err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(entry)"
        parts.append(f"{loc}={e.get('input')!r}: {e['msg']}")
    return f"{where}: " + "; ".join(parts)


def _check(where: str, merged: dict[str, float]) -> SaturationConfig:
    try:
        return SaturationConfig(**merged)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from e


def parse_saturation_configmap(data: Mapping[str, str], *, source: str = SATURATION_CONFIGMAP) -> SaturationConfigMap:
    """Parse and validate every entry; the first invalid one raises :class:`ConfigError`.

    Each override is validated merged onto the default (a partial override is legal), so a
    ``kvSpareTrigger`` above the inherited ``kvCacheThreshold`` is caught here, not at use.
    """
    entries: dict[str, _SaturationEntry] = {}
    for key in sorted(data):
        where = f"ConfigMap {source} key {key!r}"
        try:
            entry = _SaturationEntry.model_validate(_load_yaml(where, data[key]))
        except ValidationError as e:
            raise ConfigError(_validation_message(where, e)) from e
        if entry.enable_limiter:
            raise ConfigError(f"{where}: enableLimiter=true: the GPU limiter is not supported by epp autoscale")
        if entry.analyzer_name not in ("", "v1"):
            raise ConfigError(
                f"{where}: analyzerName={entry.analyzer_name!r}: only the V1 saturation analyzer is supported"
            )
        if key == _DEFAULT_KEY:
            if entry.model_id or entry.namespace:
                raise ConfigError(f"{where}: the default entry must not set model_id or namespace")
        elif not entry.namespace:
            raise ConfigError(f"{where}: an override entry needs a namespace (and optionally a model_id)")
        entries[key] = entry
    default = entries.pop(_DEFAULT_KEY, None)
    base = _check(f"ConfigMap {source} key 'default'", default.overlay(SaturationConfig()) if default else {})
    for key, entry in entries.items():
        _check(f"ConfigMap {source} key {key!r} (merged onto default)", entry.overlay(base))
    return SaturationConfigMap(default=default, overrides=entries)


@dataclass(frozen=True, slots=True)
class ScaleToZeroSetting:
    """Resolved scale-to-zero for one model: enabled, and the idle window before it applies."""

    enabled: bool = False
    retention_seconds: float = DEFAULT_RETENTION_SECONDS


class _ScaleToZeroEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model_id: str | None = None
    namespace: str | None = None
    enable_scale_to_zero: bool | None = None
    retention_period: str | None = None


@dataclass(frozen=True, slots=True)
class _ScaleToZeroParsed:
    model_id: str | None
    namespace: str | None
    enabled: bool | None
    retention_seconds: float | None


@dataclass(frozen=True, slots=True)
class ScaleToZeroConfigMap:
    """A parsed scale-to-zero ConfigMap: the default entry and the per-model entries, key order."""

    default: _ScaleToZeroParsed | None = None
    models: tuple[_ScaleToZeroParsed, ...] = ()


def parse_scale_to_zero_configmap(
    data: Mapping[str, str], *, source: str = SCALE_TO_ZERO_CONFIGMAP
) -> ScaleToZeroConfigMap:
    """Parse and validate every entry (snake_case fields, Go-duration ``retention_period`` > 0)."""
    default: _ScaleToZeroParsed | None = None
    models: list[_ScaleToZeroParsed] = []
    for key in sorted(data):  # upstream: duplicate model_id entries, lexicographically first key wins
        where = f"ConfigMap {source} key {key!r}"
        try:
            entry = _ScaleToZeroEntry.model_validate(_load_yaml(where, data[key]))
        except ValidationError as e:
            raise ConfigError(_validation_message(where, e)) from e
        retention: float | None = None
        if entry.retention_period is not None:
            try:
                retention = parse_duration(entry.retention_period)
            except ValueError as e:
                raise ConfigError(f"{where}: retention_period={entry.retention_period!r}: not a duration") from e
            if retention <= 0:
                raise ConfigError(f"{where}: retention_period={entry.retention_period!r}: must be > 0")
        parsed = _ScaleToZeroParsed(entry.model_id, entry.namespace, entry.enable_scale_to_zero, retention)
        if key == _DEFAULT_KEY:
            default = parsed
        elif not entry.model_id:
            raise ConfigError(f"{where}: a per-model entry needs model_id")
        else:
            models.append(parsed)
    return ScaleToZeroConfigMap(default=default, models=tuple(models))


class ThresholdResolver:
    """Resolves the settings for one model group from the global and namespace-local ConfigMaps.

    Immutable once built: the controller builds a new one when a ConfigMap changes (a reload
    swaps one reference) and keeps the last good one when a ConfigMap is invalid.
    """

    def __init__(
        self,
        *,
        saturation: SaturationConfigMap | None = None,
        saturation_local: Mapping[str, SaturationConfigMap] | None = None,
        scale_to_zero: ScaleToZeroConfigMap | None = None,
        scale_to_zero_local: Mapping[str, ScaleToZeroConfigMap] | None = None,
        base: SaturationConfig | None = None,
        scale_to_zero_default: bool = False,
    ) -> None:
        self._global = saturation or SaturationConfigMap()
        self._local = dict(saturation_local or {})
        self._stz_global = scale_to_zero or ScaleToZeroConfigMap()
        self._stz_local = dict(scale_to_zero_local or {})
        self._base = base or SaturationConfig()
        self._stz_default = scale_to_zero_default

    def saturation(self, key: ModelKey) -> SaturationConfig:
        """default < namespace-wide override < namespace+model override (first key in sorted order)."""
        cm = self._local.get(key.namespace, self._global)
        default = cm.default if cm.default is not None else self._global.default
        merged = default.overlay(self._base) if default else _fields(self._base)
        ns_wide: _SaturationEntry | None = None
        model_specific: _SaturationEntry | None = None
        for entry in cm.overrides.values():
            if entry.namespace != key.namespace:
                continue
            if entry.model_id is None:
                ns_wide = ns_wide or entry
            elif entry.model_id == key.model_id:
                model_specific = model_specific or entry
        for layer in (ns_wide, model_specific):
            if layer is not None:
                merged = layer.overlay(SaturationConfig(**merged))
        return SaturationConfig(**merged)

    def scale_to_zero(self, key: ModelKey) -> ScaleToZeroSetting:
        """First set value wins: model entry, then ``default``, then the ``--scale-to-zero`` flag."""
        cm = self._stz_local.get(key.namespace, self._stz_global)
        model = next(
            (m for m in cm.models if m.model_id == key.model_id and m.namespace in (None, "", key.namespace)),
            None,
        )
        enabled = self._stz_default
        retention = DEFAULT_RETENTION_SECONDS
        for entry in (cm.default, model):
            if entry is None:
                continue
            if entry.enabled is not None:
                enabled = entry.enabled
            if entry.retention_seconds is not None:
                retention = entry.retention_seconds
        return ScaleToZeroSetting(enabled=enabled, retention_seconds=retention)


def _fields(cfg: SaturationConfig) -> dict[str, float]:
    return {
        "kv_cache_threshold": cfg.kv_cache_threshold,
        "queue_length_threshold": cfg.queue_length_threshold,
        "kv_spare_trigger": cfg.kv_spare_trigger,
        "queue_spare_trigger": cfg.queue_spare_trigger,
    }
