"""Saturation autoscaler with the Workload Variant Autoscaler's (WVA v0.9) behaviour, pending-aware.

A controller (``epp autoscale``) and a library the picker process can host: build a
:class:`Controller` from a :class:`Cluster` (``KubeCluster`` for kr8s) and a
:class:`MetricsSource` (``ScrapeSource`` or ``PrometheusSource``), then ``await run_cycle()`` or
run ``run()`` as a task. Variants come from annotated HPAs and KEDA ScaledObjects (or
VariantAutoscalings); the V2 analyzer pipeline is the default, V1 selectable. Never imports
``epp.extproc``.
"""

from epp.autoscale.cluster import Cluster
from epp.autoscale.controller import Controller, ControllerOptions, Outcome
from epp.autoscale.decision import Decision, Reason, Signals
from epp.autoscale.inputs import InputError, MetricsSource, ModelSignals, PodTarget
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.peak import PeakSource
from epp.autoscale.prometheus import PrometheusSource
from epp.autoscale.resources import KubeCluster, VariantAutoscaling
from epp.autoscale.saturation_config import ConfigError, SaturationConfig, parse_saturation_configmap
from epp.autoscale.scrape import ScrapeSource
from epp.autoscale.thresholds import ThresholdResolver, parse_scale_to_zero_configmap
from epp.autoscale.types import ModelKey, ReplicaMetrics, VariantKey
from epp.autoscale.variants import Source, VariantSpec, discover, parse_variant
from epp.autoscale.wake import PickerReader

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
    "ModelSignals",
    "Outcome",
    "PeakSource",
    "PickerReader",
    "PodTarget",
    "PrometheusSource",
    "Reason",
    "ReplicaMetrics",
    "SaturationConfig",
    "ScrapeSource",
    "Signals",
    "Source",
    "ThresholdResolver",
    "VariantAutoscaling",
    "VariantKey",
    "VariantSpec",
    "discover",
    "parse_saturation_configmap",
    "parse_scale_to_zero_configmap",
    "parse_variant",
]
