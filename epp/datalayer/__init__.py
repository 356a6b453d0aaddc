"""Model-server metrics: the Prometheus text parser, engine metric maps, the scrape spec a
configuration makes, one scrape task (and one keep-alive connection) per endpoint, and the pool
gauges built from what they read.

Reads endpoints from the datastore and writes only their :class:`MetricsSnapshot`; never imports
scheduling or extproc.
"""

from epp.datalayer.engines import ENGINES, EngineSpec, Extraction, engine_spec, extract, read
from epp.datalayer.http_client import create_session
from epp.datalayer.pool_gauges import PoolGauges
from epp.datalayer.promtext import MetricSelector, ParseResult, Sample, parse, parse_selector, select
from epp.datalayer.scrape_spec import ScrapeSpecError, build_scrape_spec
from epp.datalayer.scraper import ScraperManager

__all__ = [
    "ENGINES",
    "EngineSpec",
    "Extraction",
    "MetricSelector",
    "ParseResult",
    "PoolGauges",
    "Sample",
    "ScrapeSpecError",
    "ScraperManager",
    "build_scrape_spec",
    "create_session",
    "engine_spec",
    "extract",
    "parse",
    "parse_selector",
    "read",
    "select",
]
