"""Reading the autoscaler's ConfigMaps each cycle: cached by resourceVersion, the last good one kept.

The global saturation and scale-to-zero ConfigMaps live in ``--config-namespace``; a ConfigMap of
the same name in a workload namespace replaces the global one for that namespace. Each is parsed
once per resourceVersion; an invalid one is logged with the key, field and value (and counted in
``wva_errors_total``) and the last good parse stays in force, so a typo in an edit never leaves
the autoscaler without settings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from epp.autoscale.cluster import Cluster
from epp.autoscale.saturation_config import ConfigError, SaturationConfigMap, parse_saturation_configmap
from epp.autoscale.thresholds import ScaleToZeroConfigMap, ThresholdResolver, parse_scale_to_zero_configmap

if TYPE_CHECKING:
    from epp.autoscale.controller import ControllerOptions

__all__ = ["ConfigMaps"]

log = logging.getLogger(__name__)


class ConfigMaps:
    """The ConfigMap reads of a cycle, and the resolver built from them."""

    def __init__(
        self, cluster: Cluster, options: ControllerOptions, *, on_error: Callable[[], None] | None = None
    ) -> None:
        self._cluster = cluster
        self._options = options
        self._cache: dict[tuple[str, str], tuple[str, Any]] = {}  # (ns, name) → (resourceVersion, parsed)
        self._on_error = on_error

    async def _read(self, namespace: str, name: str, parser: Callable[[Mapping[str, str], str], Any]) -> Any:
        obj = await self._cluster.get_configmap(namespace, name)
        cache_key = (namespace, name)
        if obj is None:
            self._cache.pop(cache_key, None)
            return None
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        cached = self._cache.get(cache_key)
        if cached is not None and cached[0] == version and version:
            return cached[1]
        try:
            parsed = parser(obj.get("data") or {}, f"{namespace}/{name}")
        except ConfigError as e:
            last = cached[1] if cached else None
            if self._on_error is not None:
                self._on_error()
            log.error(
                "invalid autoscaler ConfigMap; keeping the last good version",
                extra={"configmap": f"{namespace}/{name}", "error": str(e), "kept": last is not None},
            )
            self._cache[cache_key] = (version, last)
            return last
        self._cache[cache_key] = (version, parsed)
        return parsed

    async def resolver(self, namespaces: Sequence[str]) -> ThresholdResolver:
        o = self._options
        shipped = o.base

        def saturation(local: bool) -> Callable[[Mapping[str, str], str], SaturationConfigMap]:
            return lambda data, source: parse_saturation_configmap(data, source=source, local=local, shipped=shipped)

        def stz(data: Mapping[str, str], source: str) -> ScaleToZeroConfigMap:
            return parse_scale_to_zero_configmap(data, source=source)

        sat_global = await self._read(o.config_namespace, o.saturation_configmap, saturation(False))
        stz_global = await self._read(o.config_namespace, o.scale_to_zero_configmap, stz)
        sat_local: dict[str, SaturationConfigMap] = {}
        stz_local: dict[str, ScaleToZeroConfigMap] = {}
        for ns in namespaces:
            if ns == o.config_namespace:
                continue
            if (sat := await self._read(ns, o.saturation_configmap, saturation(True))) is not None:
                sat_local[ns] = sat
            if (local_stz := await self._read(ns, o.scale_to_zero_configmap, stz)) is not None:
                stz_local[ns] = local_stz
        return ThresholdResolver(
            saturation=sat_global,
            saturation_local=sat_local,
            scale_to_zero=stz_global,
            scale_to_zero_local=stz_local,
            base=shipped,
            scale_to_zero_default=o.scale_to_zero,
        )
