"""EndpointPickerConfig: the upstream config file format as pydantic models, and strict decoding.

Field names are upstream's camelCase (``apix/config/v1alpha1/endpointpickerconfig_types.go``, in
the llm-d router, whose schema is a superset of GIE's); unknown fields, duplicate YAML keys and
wrongly typed scalars are errors, as upstream's strict decoder makes them. Every error is a
:class:`ConfigError` whose message names the field path (``schedulingProfiles[0].plugins[1].weight``)
and the offending value. The models are frozen: the loader derives new ones (``model_copy``) when
it injects defaults.

Two API groups, one schema (as the llm-d router decodes them): ``llm-d.ai/v1alpha1``, and GIE's
``inference.networking.x-k8s.io/v1alpha1``, deprecated (the loader says so). Keys the llm-d router
renamed are accepted under both names, the new one winning: top-level ``saturationDetector`` →
``flowControl.saturationDetector``, top-level ``parser`` → ``requestHandler.parsers``.
"""

from __future__ import annotations

from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel

from epp.durations import parse_duration

__all__ = [
    "API_VERSION",
    "API_VERSIONS",
    "KIND",
    "LEGACY_API_VERSION",
    "ConfigError",
    "DataLayerConfig",
    "DataLayerSource",
    "EndpointPickerConfig",
    "FlowControlConfig",
    "PluginRef",
    "PluginSpec",
    "PriorityBandConfig",
    "RequestHandlerConfig",
    "SaturationDetectorRef",
    "SchedulingPlugin",
    "SchedulingProfile",
    "decode_config",
]

API_VERSION = "llm-d.ai/v1alpha1"
LEGACY_API_VERSION = "inference.networking.x-k8s.io/v1alpha1"
"""GIE's group for the file: still read (the GIE chart writes it), deprecated by the llm-d router."""
API_VERSIONS = (API_VERSION, LEGACY_API_VERSION)
KIND = "EndpointPickerConfig"


class ConfigError(ValueError):
    """An EndpointPickerConfig that cannot be used; the message names the field path and value."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


def _duration(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a duration such as '30s' or '1m'")
    parse_duration(value)  # raises ValueError naming the text
    return value


Duration = Annotated[str, PlainValidator(_duration)]
"""A Go duration string (``"30s"``, ``"1m30s"``), as ``metav1.Duration`` reads it."""


class PluginSpec(_Model):
    """``plugins[]``: an instance of a registered plugin type; ``name`` defaults to the type."""

    name: StrictStr = ""
    type: StrictStr = Field(min_length=1)
    parameters: dict[str, Any] | None = None


class SchedulingPlugin(_Model):
    """``schedulingProfiles[].plugins[]``: a reference to a plugin, with a weight for scorers."""

    plugin_ref: StrictStr = Field(min_length=1)
    weight: StrictFloat | None = Field(default=None, ge=0)


class SchedulingProfile(_Model):
    name: StrictStr = Field(min_length=1)
    plugins: tuple[SchedulingPlugin, ...] = ()


class PluginRef(_Model):
    """``parser`` / ``requestHandler.parsers[]`` / data-layer references: the name of a plugin."""

    plugin_ref: StrictStr = Field(min_length=1)


class SaturationDetectorRef(_Model):
    """``flowControl.saturationDetector`` (and the deprecated top-level one): empty means ``utilization-detector``."""

    plugin_ref: StrictStr = ""


class RequestHandlerConfig(_Model):
    """``requestHandler``: the parsers requests go through (empty: the default, ``openai-parser``)."""

    parsers: tuple[PluginRef, ...] = ()


class DataLayerSource(_Model):
    plugin_ref: StrictStr = Field(min_length=1)
    extractors: tuple[PluginRef, ...] = ()


class DataLayerConfig(_Model):
    """``dataLayer``. The llm-d router adds the metrics source unless ``injectDefaults: false``; GIE
    scraped nothing when ``sources`` was present but empty. The loader says when a config asks for
    no scraping, which this picker always does."""

    inject_defaults: StrictBool | None = None
    sources: tuple[DataLayerSource, ...] = ()
    discovery: PluginRef | None = None
    peer_discovery: PluginRef | None = None
    cross_replica_syncer_plugin_ref: StrictStr = ""
    cross_replica_sync_interval: Duration | None = None


def _quantity(value: object) -> str | int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError("must be a quantity such as '1Gi' or an integer")
    return value


Quantity = Annotated[str | int, PlainValidator(_quantity)]
"""A Kubernetes quantity (``"1Gi"``, ``"1k"``) or a plain integer."""


class PriorityBandConfig(_Model):
    priority: StrictInt | None = None
    max_bytes: Quantity | None = None
    max_requests: Quantity | None = None
    fairness_policy_ref: StrictStr | None = None
    ordering_policy_ref: StrictStr | None = None


class FlowControlConfig(_Model):
    """Decoded and validated for the flow-control layer; ``saturationDetector`` is honoured without it."""

    max_bytes: Quantity | None = None
    max_requests: Quantity | None = None
    default_request_ttl: Duration | None = Field(default=None, alias="defaultRequestTTL")
    no_endpoint_request_ttl: Duration | None = Field(default=None, alias="noEndpointRequestTTL")
    default_priority_band: PriorityBandConfig | None = None
    default_negative_priority_band: PriorityBandConfig | None = None
    priority_bands: tuple[PriorityBandConfig, ...] = ()
    usage_limit_policy_plugin_ref: StrictStr | None = None
    saturation_detector: SaturationDetectorRef | None = None
    enable_eviction: StrictBool = False

    @property
    def queueing_configured(self) -> bool:
        """Settings only the flow-control layer uses (upstream ``flowControlSettingsConfigured``, plus eviction)."""
        return bool(self.model_dump(exclude={"saturation_detector"}, exclude_defaults=True))


class EndpointPickerConfig(_Model):
    """The whole file (``kind: EndpointPickerConfig``)."""

    api_version: StrictStr
    kind: StrictStr
    feature_gates: tuple[StrictStr, ...] = ()
    plugins: tuple[PluginSpec, ...] = ()
    scheduling_profiles: tuple[SchedulingProfile, ...] = ()
    data_layer: DataLayerConfig | None = None
    flow_control: FlowControlConfig | None = None
    request_handler: RequestHandlerConfig | None = None
    saturation_detector: SaturationDetectorRef | None = None
    """Deprecated: ``flowControl.saturationDetector``, which wins when both are set."""
    parser: PluginRef | None = None
    """Deprecated: ``requestHandler.parsers``, which win when both are set."""

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        if value not in API_VERSIONS:
            raise ValueError(f"must be {API_VERSION!r} (or the deprecated {LEGACY_API_VERSION!r})")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value != KIND:
            raise ValueError(f"must be {KIND!r}")
        return value


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise ConfigError(
                f"invalid EndpointPickerConfig YAML: duplicate key {key!r} at line {key_node.start_mark.line + 1}"
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "<root>"


def _describe(error: Any) -> str:
    path = _path(tuple(error["loc"]))
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{path}: unknown field"
    if kind == "missing":
        return f"{path}: required field missing"
    value = repr(error.get("input"))
    if len(value) > 80:
        value = value[:77] + "..."
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{path}: {message} (got {value})"


def decode_config(text: str) -> EndpointPickerConfig:
    """Parse YAML (or JSON) text into a config; raises :class:`ConfigError`."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid EndpointPickerConfig YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"EndpointPickerConfig must be a mapping, got {type(data).__name__}")
    try:
        return EndpointPickerConfig.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(dict.fromkeys(_describe(e) for e in exc.errors()))
        raise ConfigError(f"invalid EndpointPickerConfig: {details}") from exc
