"""Every metric name the Grafana dashboard and the alert rules query exists on a real picker's /metrics.

The PromQL of every panel, template variable and alert rule in ``manifests/observability/`` is
reduced to the metric names it reads. A picker (``epp serve`` in-process, ``--config-file``) over
simulated pods is then driven until each series exists: routed requests (scheduler, plugins,
prefix index, request and token series), a refused request (error series) and a configuration
change (reload series), with the ``flowControl`` gate on so the queue's series exist. Each queried
name must then appear on its ``/metrics``, except ``up``, which Prometheus makes itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

OBSERVABILITY = Path(__file__).resolve().parents[1] / "manifests" / "observability"
PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself for every scrape target (the picker-down alert)."""
FLOW_CONTROL = {
    "inference_extension_flow_control_queue_size",
    "inference_extension_flow_control_request_queue_duration_seconds_bucket",
    "inference_extension_flow_control_pool_saturation",
}
"""Upstream's flow-control series: they exist only with the ``flowControl`` feature gate on (the
config below turns it on), so their panels say "(flow control on)"."""

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless"}
_AGGREGATION_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (functions, keywords and label names dropped)."""
    text = re.sub(r"\$\w+|\$\{\w+\}", " ", expr)  # Grafana variables ($__rate_interval, $pool)
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    text = _AGGREGATION_CLAUSE.sub(" ", text)
    names = set()
    for match in _NAME.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word in _KEYWORDS or re.fullmatch(r"[0-9.e+-]+", word):
            continue
        names.add(word)
    return names


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard_queries() -> dict[str, str]:
    """Every PromQL of the dashboard, by where it is (panel title or variable name)."""
    dashboard = json.loads((OBSERVABILITY / "epp-dashboard.json").read_text())
    queries = {
        f"panel {panel['title']!r} #{i}": target["expr"]
        for panel in _panels(dashboard["panels"])
        for i, target in enumerate(panel.get("targets", []))
    }
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", variable["definition"])
            queries[f"variable {variable['name']}"] = query
    return queries


def alert_queries() -> dict[str, str]:
    rules = yaml.safe_load((OBSERVABILITY / "epp-alerts.yaml").read_text())
    return {f"alert {r['alert']}": r["expr"] for group in rules["spec"]["groups"] for r in group["rules"]}


def test_the_extraction_finds_names_and_only_names() -> None:
    expr = (
        'sum by (pod_name) (rate(a_total{status="success", x=~"$pool"}[$__rate_interval])) / ignoring (pod_name) '
        "group_left sum(rate(b_total[5m])) > 0.5 * count by (name) (c) and on (name) d offset 5m"
    )
    assert metric_names(expr) == {"a_total", "b_total", "c", "d"}
    assert metric_names("histogram_quantile(0.99, sum by (le) (rate(e_bucket[5m]))) > 1e-2") == {"e_bucket"}


async def _exposed(env: HermeticPool) -> set[str]:
    async with aiohttp.ClientSession() as http, http.get(env.picker.metrics_url) as response:
        text = await response.text()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


CONFIG = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
flowControl: {}
plugins:
- type: queue-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: WEIGHT}
  - {pluginRef: prefix-cache-scorer}
"""


async def test_every_queried_name_is_on_the_pickers_metrics(epp_pool: PoolFactory, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.replace("WEIGHT", "1"))
    env = await epp_pool("v1", pods=2, picker_args=["--config-file", str(config)])
    for i in range(4):  # the same prompt twice: the prefix index hits
        routed = await env.route({"model": "m", "prompt": f"{'shared system prompt ' * 20}{i // 2}"})
        assert routed.status == 200
    assert (await env.route({"model": "m"})).status == 400  # no prompt: an error series
    config.write_text(CONFIG.replace("WEIGHT", "2"))  # a reload series
    await wait_until(
        lambda: env.sample("epp_config_reloads_total", result="success") == 1, timeout=15, message="config reload"
    )
    exposed = await _exposed(env)

    queries = {**dashboard_queries(), **alert_queries()}
    missing = {where: sorted(metric_names(expr) - exposed - PROMETHEUS_OWN) for where, expr in queries.items()}
    assert {where: names for where, names in missing.items() if names} == {}
    queried = set().union(*(metric_names(e) for e in queries.values()))
    assert queried >= FLOW_CONTROL | PROMETHEUS_OWN  # the dashboard shows the queue; "up" is still needed
    for where, expr in dashboard_queries().items():  # flow-control panels say they need it
        if metric_names(expr) & FLOW_CONTROL:
            assert "(flow control on)" in where, where
