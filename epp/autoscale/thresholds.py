"""Settings for one model group, resolved from the saturation and scale-to-zero ConfigMaps.

The saturation ConfigMap's format is :mod:`epp.autoscale.saturation_config`'s. The scale-to-zero
ConfigMap (``wva-model-scale-to-zero-config``, snake_case) has ``enable_scale_to_zero``
(tri-state) and ``retention_period`` (Go duration) under ``default`` and per ``model_id``.

A ConfigMap of the same name in a workload namespace replaces the global one for that namespace
(upstream's namespace-local maps). Unlike upstream, a missing ``default`` falls back to the global
map's, then to the shipped defaults, instead of skipping the model; and namespace-wide overrides
apply under model ones: default < namespace-wide entry < model entry, field by field, only the
fields an entry sets. Scale-to-zero: the saturation entry's inline ``scaleToZero.enabled`` wins,
then the model entry, then ``default``, then ``--scale-to-zero``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from pydantic import BaseModel, ConfigDict, ValidationError

from epp.autoscale.quota import QuotaLimiter
from epp.autoscale.saturation_config import (
    ConfigError,
    SaturationConfig,
    SaturationConfigMap,
    load_yaml_entry,
    validation_message,
)
from epp.autoscale.types import ModelKey
from epp.durations import parse_duration

__all__ = [
    "DEFAULT_RETENTION_SECONDS",
    "SCALE_TO_ZERO_CONFIGMAP",
    "ScaleToZeroConfigMap",
    "ScaleToZeroSetting",
    "ThresholdResolver",
    "parse_scale_to_zero_configmap",
]

SCALE_TO_ZERO_CONFIGMAP = "wva-model-scale-to-zero-config"
DEFAULT_RETENTION_SECONDS = 600.0
_DEFAULT_KEY = "default"


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
            entry = _ScaleToZeroEntry.model_validate(load_yaml_entry(where, data[key]))
        except ValidationError as e:
            raise ConfigError(validation_message(where, e)) from e
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

    @property
    def limiters(self) -> tuple[QuotaLimiter, ...]:
        """The quota limiters in force: the global default entry's, with ``enableLimiter: true``."""
        return self._global.limiters if self._global.enable_limiter else ()

    @property
    def global_default(self) -> SaturationConfig:
        return self._global.base(self._base)

    def saturation(self, key: ModelKey) -> SaturationConfig:
        """default < namespace-wide override < model override (each: only the fields it sets)."""
        cm = self._local.get(key.namespace, self._global)
        default_map = cm if cm.default is not None else self._global
        merged = default_map.base(self._base)
        for layer in (cm.namespace_wide.get(key.namespace), cm.per_model.get((key.namespace, key.model_id))):
            if layer:
                merged = replace(merged, **layer)
        return merged

    def scale_to_zero(self, key: ModelKey) -> ScaleToZeroSetting:
        """First set value wins: inline ``scaleToZero``, model entry, ``default``, then the flag."""
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
        inline = self.saturation(key).scale_to_zero
        return ScaleToZeroSetting(enabled=enabled if inline is None else inline, retention_seconds=retention)
