"""Protobuf table: ``apps/v1`` Deployment and ReplicaSet (``kubectl create deployment`` sends the first)."""

from __future__ import annotations

from epp_sim.apiserver.protobuf.messages import Part

__all__ = ["PART"]


PART = Part(
    messages={
        "Deployment": "metadata=1:ObjectMeta spec=2:DeploymentSpec status=3:DeploymentStatus",
        "DeploymentSpec": """replicas=1:int? selector=2:LabelSelector template=3:PodTemplateSpec
            strategy=4:DeploymentStrategy minReadySeconds=5:int revisionHistoryLimit=6:int? paused=7:bool
            progressDeadlineSeconds=9:int?""",
        "DeploymentStrategy": "type=1 rollingUpdate=2:RollingUpdateDeployment",
        "RollingUpdateDeployment": "maxUnavailable=1:IntOrString maxSurge=2:IntOrString",
        "DeploymentStatus": """observedGeneration=1:int replicas=2:int updatedReplicas=3:int availableReplicas=4:int
            unavailableReplicas=5:int conditions=6:[DeploymentCondition] readyReplicas=7:int collisionCount=8:int?
            terminatingReplicas=9:int?""",
        "DeploymentCondition": "type=1? status=2? reason=4 message=5 lastUpdateTime=6:Time lastTransitionTime=7:Time",
        "ReplicaSet": "metadata=1:ObjectMeta spec=2:ReplicaSetSpec status=3:ReplicaSetStatus",
        "ReplicaSetSpec": "replicas=1:int? selector=2:LabelSelector template=3:PodTemplateSpec minReadySeconds=4:int",
        "ReplicaSetStatus": """replicas=1:int? fullyLabeledReplicas=2:int observedGeneration=3:int readyReplicas=4:int
            availableReplicas=5:int conditions=6:[ReplicaSetCondition] terminatingReplicas=7:int?""",
        "ReplicaSetCondition": "type=1? status=2? lastTransitionTime=3:Time reason=4 message=5",
    },
    kinds=(("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")),
)
