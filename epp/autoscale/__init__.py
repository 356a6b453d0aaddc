"""Saturation autoscaler for ``VariantAutoscaling`` (llm-d WVA's V1 algorithm), pending-aware.

A controller (``epp autoscale``) and a library the picker process can host: build a
:class:`Controller` from a :class:`Cluster` (``KubeCluster`` for kr8s) and a
:class:`MetricsSource` (``ScrapeSource`` or ``PrometheusSource``), then ``await run_cycle()`` or
run ``run()`` as a task. Never imports ``epp.extproc``.
"""

from epp.autoscale.analysis import Decision, Reason, VariantInput, analyze_saturation, decide
from epp.autoscale.cluster import Cluster, VariantSpec, parse_variant
from epp.autoscale.controller import Controller, ControllerOptions, Outcome
from epp.autoscale.inputs import InputError, MetricsSource, PodTarget, PrometheusSource, ScrapeSource
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.pending import PendingTracker, replica_counts
from epp.autoscale.resources import KubeCluster, VariantAutoscaling
from epp.autoscale.thresholds import (
    ConfigError,
    SaturationConfig,
    ThresholdResolver,
    parse_saturation_configmap,
    parse_scale_to_zero_configmap,
)
from epp.autoscale.types import ModelKey, ReplicaMetrics, VariantKey

__all__ = [
    "AutoscalerMetrics",
    "Cluster",
    "ConfigError",
    "Controller",
    "ControllerOptions",
    "Decision",
    "InputError",
    "KubeCluster",
    "MetricsSource",
    "ModelKey",
    "Outcome",
    "PendingTracker",
    "PodTarget",
    "PrometheusSource",
    "Reason",
    "ReplicaMetrics",
    "SaturationConfig",
    "ScrapeSource",
    "ThresholdResolver",
    "VariantAutoscaling",
    "VariantInput",
    "VariantKey",
    "VariantSpec",
    "analyze_saturation",
    "decide",
    "parse_saturation_configmap",
    "parse_scale_to_zero_configmap",
    "parse_variant",
    "replica_counts",
]
