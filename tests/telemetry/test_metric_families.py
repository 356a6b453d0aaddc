"""Metric families under GIE's names, the llm-d router's, or both: names, labels, HELP and equal values."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from epp.picker_series import declare_picker_series
from epp.plugins.approx_prefix_producer import ApproxPrefixCacheProducer
from epp.plugins.pickers import RandomPicker
from epp.requestcontrol.plugin_series import PluginSeries, Readings
from epp.telemetry.families import Families, Names
from epp.telemetry.metrics import EppMetrics

REQUEST = ("model_name", "target_model_name", "fairness_id", "priority")
ATTEMPTS = Names(
    "inference_extension_scheduler_attempts_total",
    "llm_d_epp_scheduler_attempts_total",
    "Total number of scheduling attempts.",
    labels=("status", "endpoint_name"),
    gie_labels=("status", "pod_name"),
    renamed={"pod_name": "endpoint_name"},
)


def sample(registry: CollectorRegistry, series: str, **labels: str) -> float | None:
    return registry.get_sample_value(series, labels)


def exposition(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_both_writes_each_value_to_the_gie_series_and_its_twin_with_renamed_labels() -> None:
    registry = CollectorRegistry()
    attempts = Families(registry, "both").counter(ATTEMPTS)
    attempts.labels("success", "pod-rank-0").inc()
    attempts.labels("success", "pod-rank-0").inc(2)
    assert (
        sample(registry, "inference_extension_scheduler_attempts_total", status="success", pod_name="pod-rank-0") == 3
    )
    assert sample(registry, "llm_d_epp_scheduler_attempts_total", status="success", endpoint_name="pod-rank-0") == 3
    text = exposition(registry)
    assert (
        "# HELP inference_extension_scheduler_attempts_total [ALPHA] "
        "[Deprecated: Use llm_d_epp_scheduler_attempts_total] Total number of scheduling attempts."
    ) in text
    assert "# HELP llm_d_epp_scheduler_attempts_total [ALPHA] Total number of scheduling attempts." in text


@pytest.mark.parametrize(
    ("naming", "present", "absent"), [("gie", "inference_", "llm_d_"), ("llm-d", "llm_d_", "inference_")]
)
def test_one_naming_registers_only_its_own_series(naming: str, present: str, absent: str) -> None:
    registry = CollectorRegistry()
    attempts = Families(registry, naming).counter(ATTEMPTS)  # type: ignore[arg-type]
    attempts.labels("failure", "").inc()
    text = exposition(registry)
    assert f"{present}extension_scheduler" in text or f"{present}epp_scheduler" in text
    assert absent not in text
    assert "Deprecated" not in text  # GIE's HELP verbatim when there is no twin


def test_gie_request_series_take_their_subset_of_the_llm_d_labels() -> None:
    registry = CollectorRegistry()
    running = Families(registry, "both").gauge(
        Names(
            "inference_objective_running_requests",
            "llm_d_epp_request_running",
            "running",
            labels=REQUEST,
            gie_labels=("model_name",),
        )
    )
    running.labels("m", "t1", "tenant-a", "0").inc()
    running.labels("m", "t2", "tenant-b", "-1").inc()
    running.labels("m", "t2", "tenant-b", "-1").dec()
    assert sample(registry, "inference_objective_running_requests", model_name="m") == 1  # one series, both requests
    twin = {"model_name": "m", "target_model_name": "t1", "fairness_id": "tenant-a", "priority": "0"}
    assert sample(registry, "llm_d_epp_request_running", **twin) == 1
    assert (
        sample(
            registry,
            "llm_d_epp_request_running",
            **{**twin, "target_model_name": "t2", "fairness_id": "tenant-b", "priority": "-1"},
        )
        == 0
    )


def test_children_are_cached_and_removal_reaches_both_series() -> None:
    registry = CollectorRegistry()
    gauge = Families(registry, "both").gauge(
        Names("inference_pool_ready_pods", "llm_d_epp_ready_endpoints", "ready", labels=("name",))
    )
    assert gauge.labels("pool") is gauge.labels("pool")
    gauge.labels("pool").set(2)
    gauge.remove("pool")
    assert sample(registry, "inference_pool_ready_pods", name="pool") is None
    assert sample(registry, "llm_d_epp_ready_endpoints", name="pool") is None
    gauge.labels("pool").set(1)  # a fresh child after the removal, not the removed one
    assert sample(registry, "llm_d_epp_ready_endpoints", name="pool") == 1


def test_a_histogram_twin_observes_the_same_values_into_the_same_buckets() -> None:
    registry = CollectorRegistry()
    e2e = Families(registry, "both").histogram(
        Names("inference_extension_scheduler_e2e_duration_seconds", "llm_d_epp_scheduler_e2e_duration_seconds", "e2e"),
        (0.001, 0.01),
    )
    for value in (0.0005, 0.005, 0.5):
        e2e.observe(value)
    for name in ("inference_extension_scheduler_e2e_duration_seconds", "llm_d_epp_scheduler_e2e_duration_seconds"):
        assert sample(registry, f"{name}_bucket", le="0.01") == 2
        assert sample(registry, f"{name}_sum") == pytest.approx(0.5055)


def test_every_upstream_series_of_the_picker_has_its_llm_d_twin() -> None:
    both, gie, llm_d = (EppMetrics(naming=n) for n in ("both", "gie", "llm-d"))  # type: ignore[arg-type]

    def names(metrics: EppMetrics) -> set[str]:
        declare_picker_series(metrics)
        return {m.name for m in metrics.registry.collect()}

    assert names(both) == names(gie) | names(llm_d)
    assert {n for n in names(gie) if n.startswith("llm_d_")} == set()
    assert {n for n in names(llm_d) if n.startswith("inference_")} == set()
    twins = {
        "inference_objective_request": "llm_d_epp_request",
        "inference_objective_request_error": "llm_d_epp_request_error",
        "inference_objective_request_duration_seconds": "llm_d_epp_request_duration_seconds",
        "inference_objective_request_sizes": "llm_d_epp_request_size_bytes",
        "inference_objective_response_sizes": "llm_d_epp_response_size_bytes",
        "inference_objective_input_tokens": "llm_d_epp_request_input_tokens",
        "inference_objective_output_tokens": "llm_d_epp_request_output_tokens",
        "inference_objective_prompt_cached_tokens": "llm_d_epp_request_cached_tokens",
        "inference_objective_running_requests": "llm_d_epp_request_running",
        "inference_objective_normalized_time_per_output_token_seconds": "llm_d_epp_request_ntpot_seconds",
        "inference_pool_average_kv_cache_utilization": "llm_d_epp_average_kv_cache_utilization",
        "inference_pool_average_queue_size": "llm_d_epp_average_queue_size",
        "inference_pool_average_running_requests": "llm_d_epp_average_running_requests",
        "inference_pool_ready_pods": "llm_d_epp_ready_endpoints",
        "inference_pool_per_pod_queue_size": "llm_d_epp_per_endpoint_queue_size",
        "inference_extension_scheduler_e2e_duration_seconds": "llm_d_epp_scheduler_e2e_duration_seconds",
        "inference_extension_scheduler_attempts": "llm_d_epp_scheduler_attempts",
        "inference_extension_plugin_duration_seconds": "llm_d_epp_plugin_duration_seconds",
        "inference_extension_prefix_indexer_size": "llm_d_epp_prefix_indexer_size",
        "inference_extension_prefix_indexer_hit_ratio": "llm_d_epp_prefix_indexer_hit_ratio",
        "inference_extension_prefix_indexer_hit_bytes": "llm_d_epp_prefix_indexer_hit_bytes",
        "inference_extension_model_rewrite_decisions": "llm_d_epp_model_rewrite_decisions",
        "inference_extension_info": "llm_d_epp_info",
        **{
            f"inference_extension_flow_control_{name}": f"llm_d_epp_flow_control_{name}"
            for name in (
                "queue_size",
                "queue_bytes",
                "request_queue_duration_seconds",
                "dispatch_cycle_duration_seconds",
                "pool_saturation",
            )
        },
    }
    upstream_gie = {n for n in names(gie) if n.startswith("inference_")} - {"inference_model_request"}  # v0.3 only
    assert upstream_gie == set(twins)
    assert set(twins.values()) <= names(llm_d)


def _producer(name: str, entries: int) -> ApproxPrefixCacheProducer:
    """An approx-prefix-cache-producer whose index holds ``entries`` blocks."""
    producer = ApproxPrefixCacheProducer(name)
    producer.index.add("ns/pod-rank-0", list(range(entries)))
    return producer


def test_prefix_index_sizes_sum_for_gie_and_split_by_plugin_for_llm_d() -> None:
    metrics = EppMetrics()
    series = metrics.series(PluginSeries)
    picker = RandomPicker(rng=random.Random(1))  # a plugin that measures nothing: skipped
    series.publish(Readings.of([_producer("a", 3), _producer("b", 4), picker]))
    series.publish(
        Readings.of([_producer("a", 2), _producer("a", 3)])
    )  # plugin b went away on a reload; a is in two pools
    r = metrics.registry
    assert sample(r, "inference_extension_prefix_indexer_size") == 5
    assert sample(r, "llm_d_epp_prefix_indexer_size", plugin_name="a", plugin_type="approx-prefix-cache-producer") == 5
    assert (
        sample(r, "llm_d_epp_prefix_indexer_size", plugin_name="b", plugin_type="approx-prefix-cache-producer") is None
    )


def test_an_unknown_naming_is_refused() -> None:
    with pytest.raises(ValueError, match=r"metrics naming must be one of \['gie', 'llm-d', 'both'\], got 'llmd'"):
        EppMetrics(naming="llmd")  # type: ignore[arg-type]
