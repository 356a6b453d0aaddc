"""metrics-data-source: how the picker fetches each model server's Prometheus ``/metrics``.

Parameters, as the llm-d router's (``pkg/epp/framework/plugins/datalayer/source/metrics``):
``scheme`` (http | https), ``path``, ``port`` (scrape this port instead of each endpoint's
metrics port: not for pools with several target ports, whose ranks each have their own),
``insecureSkipVerify`` (upstream default true: the server certificate is not checked),
``caCertPath`` (PEM bundle to check it against instead of the system CAs; upstream ignores it
while ``insecureSkipVerify`` is true, and so does this picker, saying so at load),
``clientCertPath`` + ``clientKeyPath`` (a client certificate for mTLS, both or neither) and
``interval`` (a Go duration; rounded by the scraper to a multiple of the base tick,
``--refresh-metrics-interval``; omitted, "" or "0": every base tick).

A parameter the configuration leaves out is None in :class:`MetricsSourceSpec`, so GIE's
``--model-server-metrics-*`` flag fills it (``epp.datalayer.scrape_spec``): the configuration
wins over the flags for what it sets. Only the parameters are checked here; the certificate
files are read when the scrape spec is built, still while the configuration loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from epp.framework.datalayer import MetricsSourceSpec
from epp.framework.params import Params, parse_duration
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind

__all__ = ["TYPE", "MetricsDataSource", "create"]

TYPE = "metrics-data-source"
_SCHEMES: Mapping[str, Literal["http", "https"]] = {"http": "http", "https": "https"}


class MetricsDataSource(NamedPlugin):
    """A configured metrics source; the scraper runs what :attr:`source` says."""

    __slots__ = ("_source",)
    plugin_type = TYPE
    kinds = frozenset({PluginKind.DATA_SOURCE})

    def __init__(self, name: str, source: MetricsSourceSpec) -> None:
        super().__init__(name)
        self._source = source

    @property
    def source(self) -> MetricsSourceSpec:
        return self._source


def _interval(text: str | None) -> float | None:
    if not text:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise PluginConfigError(f"{TYPE}.parameters.interval: must be a duration such as '1s', got {text!r}") from None
    if seconds < 0:
        raise PluginConfigError(f"{TYPE}.parameters.interval: must not be negative, got {text!r}")
    return seconds or None


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> MetricsDataSource:
    p = Params(TYPE, params)
    raw_scheme = p.text("scheme")
    scheme = _SCHEMES.get(raw_scheme) if raw_scheme is not None else None
    if raw_scheme is not None and scheme is None:
        raise PluginConfigError(f"{TYPE}.parameters.scheme: must be http or https, got {raw_scheme!r}")
    path = p.text("path")
    if path is not None and not path.startswith("/"):
        raise PluginConfigError(f"{TYPE}.parameters.path: must start with '/', got {path!r}")
    port = p.integer("port", 0, minimum=1)
    if port > 65535:
        raise PluginConfigError(f"{TYPE}.parameters.port: must be <= 65535, got {port}")
    skip_verify = p.optional_boolean("insecureSkipVerify")
    ca, cert, key = (p.text(k) or "" for k in ("caCertPath", "clientCertPath", "clientKeyPath"))
    if bool(cert) != bool(key):
        raise PluginConfigError(
            f"{TYPE}.parameters: clientCertPath and clientKeyPath go together (mTLS), got "
            f"clientCertPath={cert!r}, clientKeyPath={key!r}"
        )
    interval = _interval(p.text("interval"))
    p.done()
    source = MetricsSourceSpec(
        scheme=scheme,
        path=path,
        port=port or None,
        insecure_skip_verify=skip_verify,
        ca_cert_path=ca,
        client_cert_path=cert,
        client_key_path=key,
        interval=interval,
    )
    return MetricsDataSource(name, source)
