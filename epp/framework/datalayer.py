"""Data-layer plugin contracts: what a metrics source and a metrics extractor hand the scraper.

Upstream's data layer is a graph of sources (``metrics-data-source``: how to fetch a pod's
``/metrics``) and extractors (``core-metrics-extractor``: which metric means what, per engine).
Here both are plugins the loader instantiates from ``EndpointPickerConfig`` and wires as
``dataLayer.sources`` says; each exposes one immutable value, and the pair (with GIE's flags)
becomes the :class:`ScrapeSpec` the scrapers run (built by ``epp.datalayer.scrape_spec``, which
the loader is handed, as it must not import the data layer). A source field left None was not
set in the configuration, so GIE's ``--model-server-metrics-*`` flag (or its default) applies.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from epp.framework.engine_metrics import DEFAULT_ENGINE_TABLE, EngineTable
from epp.framework.plugin import TypedName

__all__ = ["MetricsExtractor", "MetricsSource", "MetricsSourceSpec", "ScrapeSpec", "Transport"]


@dataclass(frozen=True, slots=True)
class MetricsSourceSpec:
    """``metrics-data-source`` parameters as configured; None (or "") means not set."""

    scheme: Literal["http", "https"] | None = None
    path: str | None = None
    port: int | None = None
    """Scrape this port instead of each endpoint's metrics port."""
    insecure_skip_verify: bool | None = None
    ca_cert_path: str = ""
    client_cert_path: str = ""
    client_key_path: str = ""
    interval: float | None = None
    """Seconds between scrapes as asked for (0 or None: every base tick); rounded by the scraper."""


@runtime_checkable
class MetricsSource(Protocol):
    """A plugin that says how model servers' metrics are fetched."""

    @property
    def typed_name(self) -> TypedName: ...

    @property
    def source(self) -> MetricsSourceSpec: ...


@runtime_checkable
class MetricsExtractor(Protocol):
    """A plugin that says which engine a pod runs and which metrics each engine exposes."""

    @property
    def typed_name(self) -> TypedName: ...

    @property
    def engine_table(self) -> EngineTable: ...


@dataclass(frozen=True, slots=True)
class Transport:
    """How a page is fetched; scrapers replace their connections when this changes."""

    scheme: Literal["http", "https"] = "http"
    path: str = "/metrics"
    port: int | None = None
    """None: each endpoint's metrics port."""
    verify: bool = False
    ca_cert_path: str = ""
    client_cert_path: str = ""
    client_key_path: str = ""


@dataclass(frozen=True, slots=True)
class ScrapeSpec:
    """Everything a scraper needs, immutable; a configuration reload hands the scraper a new one.

    The default is what the picker runs with no configuration and no flags: plain HTTP on
    ``/metrics`` every base tick, the built-in engines, ``vllm`` for unlabelled pods.
    """

    transport: Transport = Transport()
    interval: float | None = None
    """Seconds between scrapes as configured; None: every base tick (the scraper rounds it to its base tick)."""
    engines: EngineTable = DEFAULT_ENGINE_TABLE
    """The engine maps, with GIE's metric-name flags applied."""
    tls: ssl.SSLContext | None = field(default=None, compare=False)
    """Built from :attr:`transport` for ``https``; None for ``http``."""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """Configured settings that have no effect, each a sentence naming the parameter."""
