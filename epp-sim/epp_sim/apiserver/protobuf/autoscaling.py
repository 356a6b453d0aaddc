"""Protobuf table: ``autoscaling/v1`` Scale (the scale subresource) and ``autoscaling/v2`` HorizontalPodAutoscaler.

``kubectl autoscale`` sends an ``autoscaling/v2`` HorizontalPodAutoscaler; its messages are here
so that a server serving that kind reads it.
"""

from __future__ import annotations

from epp_sim.apiserver.protobuf.messages import Part

__all__ = ["PART"]

_V2 = "autoscaling/v2"
_METRIC = """type=1? object=2:ObjectMetric{0} pods=3:PodsMetric{0} resource=4:ResourceMetric{0}
    external=5:ExternalMetric{0} containerResource=7:ContainerResourceMetric{0}"""
"""``MetricSpec`` and ``MetricStatus``: one field per metric source, each a ``…MetricSource`` / ``…MetricStatus``."""


def _per_source(suffix: str, value: str) -> dict[str, str]:
    """The pods, resource, container-resource and external ``…Metric{suffix}`` messages: field 2 is ``value``."""
    return {
        f"PodsMetric{suffix}": f"metric=1:MetricIdentifier {value}",
        f"ResourceMetric{suffix}": f"name=1? {value}",
        f"ContainerResourceMetric{suffix}": f"name=1? {value} container=3?",
        f"ExternalMetric{suffix}": f"metric=1:MetricIdentifier {value}",
    }


PART = Part(
    messages={
        "Scale": "metadata=1:ObjectMeta spec=2:ScaleSpec status=3:ScaleStatus",
        "ScaleSpec": "replicas=1:int",
        "ScaleStatus": "replicas=1:int? selector=2",
        "HorizontalPodAutoscaler": """metadata=1:ObjectMeta spec=2:HorizontalPodAutoscalerSpec
            status=3:HorizontalPodAutoscalerStatus""",
        "HorizontalPodAutoscalerSpec": """scaleTargetRef=1:CrossVersionObjectReference minReplicas=2:int?
            maxReplicas=3:int? metrics=4:[MetricSpec] behavior=5:HorizontalPodAutoscalerBehavior""",
        "CrossVersionObjectReference": "kind=1? name=2? apiVersion=3",
        "MetricSpec": _METRIC.format("Source"),
        "ObjectMetricSource": """describedObject=1:CrossVersionObjectReference target=2:MetricTarget
            metric=3:MetricIdentifier""",
        **_per_source("Source", "target=2:MetricTarget"),
        "MetricIdentifier": "name=1? selector=2:LabelSelector",
        "MetricTarget": "type=1? value=2:Quantity averageValue=3:Quantity averageUtilization=4:int?",
        "HorizontalPodAutoscalerBehavior": "scaleUp=1:HPAScalingRules scaleDown=2:HPAScalingRules",
        "HPAScalingRules": """selectPolicy=1? policies=2:[HPAScalingPolicy] stabilizationWindowSeconds=3:int?
            tolerance=4:Quantity""",
        "HPAScalingPolicy": "type=1? value=2:int? periodSeconds=3:int?",
        "HorizontalPodAutoscalerStatus": """observedGeneration=1:int? lastScaleTime=2:Time currentReplicas=3:int
            desiredReplicas=4:int? currentMetrics=5:[MetricStatus] conditions=6:[HorizontalPodAutoscalerCondition]""",
        "MetricStatus": _METRIC.format("Status"),
        "ObjectMetricStatus": """metric=1:MetricIdentifier current=2:MetricValueStatus
            describedObject=3:CrossVersionObjectReference""",
        **_per_source("Status", "current=2:MetricValueStatus"),
        "MetricValueStatus": "value=1:Quantity averageValue=2:Quantity averageUtilization=3:int?",
        "HorizontalPodAutoscalerCondition": """type=1? status=2? lastTransitionTime=3:Time reason=4 message=5
            observedGeneration=6:int?""",
    },
    kinds=(("autoscaling/v1", "Scale"), (_V2, "HorizontalPodAutoscaler")),
)
