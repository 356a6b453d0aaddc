"""The scrape the data layer runs: where and how to fetch each page, how often, and how to read it.

One :class:`~epp.framework.datalayer.ScrapeSpec` is built per configuration load (the runtime
hands :func:`build_scrape_spec` to ``epp.config.loader``) from the
``metrics-data-source`` and ``core-metrics-extractor`` the configuration wires (either may be
absent) and GIE's scraping flags (``ModelServerMetricsOptions``). Precedence, per setting:

1. what the configuration's data-layer plugin sets (an explicit parameter; an
   ``engineConfigs`` entry for that engine's metric names);
2. else GIE's flag (``--model-server-metrics-scheme``, ``-path``,
   ``-https-insecure-skip-verify``; the ``--*-metric`` flags override the built-in engines'
   names); ``--model-server-metrics-port`` sets the endpoints' metrics port in the datastore,
   which the source's ``port`` overrides;
3. else the default: ``http``, ``/metrics``, certificate not checked, every base tick, the
   built-in engines with ``vllm`` as the default engine.

Building reads the CA bundle and client certificate (TLS errors surface at load, so a bad
reload is rejected whole) and applies the flags' metric names to each engine map once, so a
scrape only looks up its endpoint's map. Settings that have no effect (a CA bundle while the
certificate is not checked, TLS files over plain HTTP: upstream ignores them too) are listed
in ``ScrapeSpec.notes`` for the loader to report.
"""

from __future__ import annotations

import dataclasses
import ssl
from types import MappingProxyType

from epp.config.options import MIN_REFRESH_METRICS_INTERVAL, ModelServerMetricsOptions
from epp.datalayer.engines import with_overrides
from epp.datalayer.metrics_fetch import TlsFileError, tls_context
from epp.datalayer.promtext import SelectorError
from epp.framework.datalayer import MetricsSourceSpec, ScrapeSpec, Transport
from epp.framework.engine_metrics import DEFAULT_ENGINE_TABLE, EngineTable

__all__ = ["ScrapeSpecError", "build_scrape_spec", "effective_interval"]


class ScrapeSpecError(ValueError):
    """Settings that cannot make a scrape; the message names the parameter or flag."""


def _transport(source: MetricsSourceSpec, flags: ModelServerMetricsOptions) -> tuple[Transport, list[str]]:
    skip_verify = source.insecure_skip_verify
    if skip_verify is None:
        skip_verify = flags.https_insecure_skip_verify
    scheme = source.scheme or flags.scheme
    transport = Transport(
        scheme=scheme,
        path=source.path or flags.path,
        port=source.port,
        verify=not skip_verify,
        ca_cert_path=source.ca_cert_path,
        client_cert_path=source.client_cert_path,
        client_key_path=source.client_key_path,
    )
    notes: list[str] = []
    files = [k for k, v in (("caCertPath", source.ca_cert_path), ("clientCertPath", source.client_cert_path)) if v]
    if scheme == "http" and files:
        notes.append(f"{' and '.join(files)}: no effect, the scheme is http (no TLS)")
        transport = dataclasses.replace(transport, ca_cert_path="", client_cert_path="", client_key_path="")
    elif source.ca_cert_path and skip_verify:
        notes.append(
            "caCertPath has no effect while insecureSkipVerify is true (the server certificate is not checked, "
            "as upstream); set insecureSkipVerify: false to check it against the bundle"
        )
        transport = dataclasses.replace(transport, ca_cert_path="")
    return transport, notes


def _engines(table: EngineTable, flags: ModelServerMetricsOptions) -> EngineTable:
    try:
        engines = {
            name: spec if name in table.configured else with_overrides(spec, flags)
            for name, spec in table.engines.items()
        }
    except SelectorError as e:
        raise ScrapeSpecError(f"a --*-metric flag: {e}") from e
    if all(engines[name] is spec for name, spec in table.engines.items()):
        return table
    return dataclasses.replace(table, engines=MappingProxyType(engines))


def build_scrape_spec(
    source: MetricsSourceSpec | None, table: EngineTable | None, flags: ModelServerMetricsOptions
) -> ScrapeSpec:
    """The scrape for a configuration's source and extractor (None: not configured) under the flags.

    Raises :class:`ScrapeSpecError` when a certificate file cannot be loaded.
    """
    transport, notes = _transport(source or MetricsSourceSpec(), flags)
    tls: ssl.SSLContext | None = None
    if transport.scheme == "https":
        try:
            tls = tls_context(
                verify=transport.verify,
                ca_file=transport.ca_cert_path,
                cert_file=transport.client_cert_path,
                key_file=transport.client_key_path,
            )
        except TlsFileError as e:
            raise ScrapeSpecError(str(e)) from e
    return ScrapeSpec(
        transport=transport,
        interval=source.interval if source is not None else None,
        engines=_engines(table or DEFAULT_ENGINE_TABLE, flags),
        tls=tls,
        notes=tuple(notes),
    )


def effective_interval(requested: float | None, base: float) -> float:
    """Seconds between scrapes for a source asking for ``requested`` when the base tick is ``base``.

    Upstream's rule (``periodTicks``): the base tick drops to the source's interval when that is
    shorter (not below 50 ms), and the interval is rounded, half up, to a whole number (at least
    one) of ticks. Worked in integer nanoseconds, as Go's durations are, so 75 ms over 50 ms
    ticks is 1.5 ticks and rounds up to 100 ms.
    """
    if not requested or requested <= 0:
        return base
    tick_ns = round(min(base, max(requested, MIN_REFRESH_METRICS_INTERVAL)) * 1e9)
    requested_ns = round(requested * 1e9)
    ticks = max(1, (2 * requested_ns + tick_ns) // (2 * tick_ns))
    return ticks * tick_ns / 1e9
