"""``/metrics`` with ``--workers``: the children's request series added to the parent's, the rest the parent's alone."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from epp.picker_series import declare_picker_series, worker_family_names
from epp.telemetry.merged import MergedRegistry, WorkerFamilies, families_of
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter, Gauge, Histogram


def _registry() -> tuple[CollectorRegistry, Counter, Histogram, Gauge]:
    registry = CollectorRegistry(auto_describe=True)
    counter = Counter("requests_total", "Requests.", ("model",), registry=registry)
    histogram = Histogram("latency_seconds", "Latency.", ("model",), buckets=(0.1, 1.0), registry=registry)
    gauge = Gauge("running", "Running.", ("model",), registry=registry)
    return registry, counter, histogram, gauge


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_children_add_to_the_parents_series_and_their_own_label_sets_appear() -> None:
    parent, p_counter, p_hist, p_gauge = _registry()
    child, c_counter, c_hist, c_gauge = _registry()
    p_counter.labels(model="a").inc(3)
    p_hist.labels(model="a").observe(0.05)
    p_gauge.labels(model="a").set(2)
    c_counter.labels(model="a").inc(4)
    c_counter.labels(model="b").inc(1)  # a label set only the child has
    c_hist.labels(model="b").observe(0.5)
    c_gauge.labels(model="a").set(5)
    names = frozenset({"requests", "latency_seconds", "running"})
    workers = WorkerFamilies()
    workers.update(1, families_of(child, names))
    workers.freeze()
    merged = _samples(MergedRegistry(parent, workers))
    assert merged[("requests_total", (("model", "a"),))] == 7
    assert merged[("requests_total", (("model", "b"),))] == 1
    assert merged[("running", (("model", "a"),))] == 7  # in flight in either process
    assert merged[("latency_seconds_count", (("model", "a"),))] == 1
    assert merged[("latency_seconds_bucket", (("le", "1.0"), ("model", "b")))] == 1
    assert merged[("latency_seconds_bucket", (("le", "0.1"), ("model", "b")))] == 0


def test_an_ended_childs_counts_stay_and_its_gauges_go() -> None:
    parent, _, _, _ = _registry()
    child, c_counter, _, c_gauge = _registry()
    c_counter.labels(model="a").inc(4)
    c_gauge.labels(model="a").set(5)
    names = frozenset({"requests", "running"})
    workers = WorkerFamilies()
    workers.update(1, families_of(child, names))
    workers.retire(1)
    replacement, r_counter, _, _ = _registry()
    r_counter.labels(model="a").inc(1)
    workers.update(1, families_of(replacement, names))
    workers.freeze()
    merged = _samples(MergedRegistry(parent, workers))
    assert merged[("requests_total", (("model", "a"),))] == 5  # never goes down across a restart
    assert ("running", (("model", "a"),)) not in merged


def test_nothing_is_added_before_freeze_and_only_named_families_are_sent() -> None:
    parent, p_counter, _, _ = _registry()
    child, c_counter, _, _ = _registry()
    p_counter.labels(model="a").inc(1)
    c_counter.labels(model="a").inc(1)
    workers = WorkerFamilies()
    workers.update(1, families_of(child, frozenset({"requests"})))
    assert _samples(MergedRegistry(parent, workers))[("requests_total", (("model", "a"),))] == 1
    assert [f[0] for f in families_of(child, frozenset({"requests"}))] == ["requests"]


def test_the_pods_own_series_are_not_worker_series() -> None:
    names = worker_family_names("both")
    assert "inference_objective_request" in names and "epp_worker_streams" in names
    picker = EppMetrics(naming="both")
    declare_picker_series(picker)
    every = {m.name for m in picker.registry.collect()}
    # Readiness, pool gauges, scrapes, configuration and endpoint health are the parent's alone.
    own = {"epp_ready", "inference_pool_ready_pods", "epp_scrape_duration_seconds", "epp_endpoint_health"}
    assert own <= every and not own & names
