"""The default EndpointPickerConfig, as code (used when no ``--config-file``/``--config-text``).

score = 2·queue + 2·(1 − kv) + 3·prefix-match + 1·lora-affinity, then ``max-score-picker`` (one
endpoint, random tie-break) under ``single-profile-handler``: upstream's default profile plus the
LoRA affinity scorer. :data:`DEFAULT_SCORERS` is the one place to change the default weights.
The system defaults the loader injects into *any* config (default weight, picker, handler,
saturation detector) are named here too, so the whole default lives in one file.
"""

from __future__ import annotations

from epp.config.picker_config import (
    API_VERSION,
    KIND,
    EndpointPickerConfig,
    PluginSpec,
    SchedulingPlugin,
    SchedulingProfile,
)
from epp.plugins import (
    kv_cache_scorer,
    lora_affinity_scorer,
    pickers,
    prefix_cache_scorer,
    queue_scorer,
    single_profile,
    utilization_detector,
)

__all__ = [
    "DEFAULT_PICKER_TYPE",
    "DEFAULT_PROFILE_HANDLER_TYPE",
    "DEFAULT_PROFILE_NAME",
    "DEFAULT_SATURATION_DETECTOR_TYPE",
    "DEFAULT_SCORERS",
    "DEFAULT_SCORER_WEIGHT",
    "default_config",
]

DEFAULT_PROFILE_NAME = "default"
DEFAULT_SCORER_WEIGHT = 1.0
DEFAULT_PICKER_TYPE = pickers.MAX_SCORE_TYPE
DEFAULT_PROFILE_HANDLER_TYPE = single_profile.TYPE
DEFAULT_SATURATION_DETECTOR_TYPE = utilization_detector.TYPE

# (scorer type, weight) of the default profile.
DEFAULT_SCORERS: tuple[tuple[str, float], ...] = (
    (queue_scorer.TYPE, 2.0),
    (kv_cache_scorer.TYPE, 2.0),
    (prefix_cache_scorer.TYPE, 3.0),
    (lora_affinity_scorer.TYPE, 1.0),
)


def default_config() -> EndpointPickerConfig:
    """The config the picker runs when none is given (plugins named after their types)."""
    return EndpointPickerConfig(
        api_version=API_VERSION,
        kind=KIND,
        plugins=(
            *(PluginSpec(name=t, type=t) for t, _ in DEFAULT_SCORERS),
            PluginSpec(name=DEFAULT_PICKER_TYPE, type=DEFAULT_PICKER_TYPE),
            PluginSpec(name=DEFAULT_PROFILE_HANDLER_TYPE, type=DEFAULT_PROFILE_HANDLER_TYPE),
        ),
        scheduling_profiles=(
            SchedulingProfile(
                name=DEFAULT_PROFILE_NAME,
                plugins=(
                    *(SchedulingPlugin(plugin_ref=t, weight=w) for t, w in DEFAULT_SCORERS),
                    SchedulingPlugin(plugin_ref=DEFAULT_PICKER_TYPE),
                ),
            ),
        ),
    )
