"""Protobuf table: the ``v1`` PodStatus a kubelet writes: phase, conditions, addresses, container states.

The dynamic-resource-allocation and volume-health reports (``extendedResourceClaimStatus``,
``nodeAllocatableResourceClaimStatuses``, ``volumeHealth``, ``allocatedResourcesStatus``) are
named but not decoded.
"""

from __future__ import annotations

from epp_sim.apiserver.protobuf.messages import Part

__all__ = ["PART"]

PART = Part(
    messages={
        "PodStatus": """phase=1 conditions=2:[PodCondition] message=3 reason=4 hostIP=5 podIP=6 startTime=7:Time
            containerStatuses=8:[ContainerStatus] qosClass=9 initContainerStatuses=10:[ContainerStatus]
            nominatedNodeName=11 podIPs=12:[PodIP] ephemeralContainerStatuses=13:[ContainerStatus] resize=14
            resourceClaimStatuses=15:[PodResourceClaimStatus] hostIPs=16:[HostIP] observedGeneration=17:int
            extendedResourceClaimStatus=18:- allocatedResources=19:{Quantity} resources=20:ResourceRequirements
            nodeAllocatableResourceClaimStatuses=21:- volumeHealth=22:-""",
        "PodCondition": """type=1? status=2? lastProbeTime=3:Time lastTransitionTime=4:Time reason=5 message=6
            observedGeneration=7:int""",
        "PodIP": "ip=1?",
        "HostIP": "ip=1?",
        "PodResourceClaimStatus": "name=1? resourceClaimName=2?",
        "ContainerStatus": """name=1? state=2:ContainerState lastState=3:ContainerState ready=4:bool?
            restartCount=5:int? image=6? imageID=7? containerID=8 started=9:bool? allocatedResources=10:{Quantity}
            resources=11:ResourceRequirements volumeMounts=12:[VolumeMountStatus] user=13:ContainerUser
            allocatedResourcesStatus=14:- stopSignal=15?""",
        "ContainerState": """waiting=1:ContainerStateWaiting running=2:ContainerStateRunning
            terminated=3:ContainerStateTerminated""",
        "ContainerStateWaiting": "reason=1 message=2",
        "ContainerStateRunning": "startedAt=1:Time",
        "ContainerStateTerminated": """exitCode=1:int? signal=2:int reason=3 message=4 startedAt=5:Time
            finishedAt=6:Time containerID=7""",
        "VolumeMountStatus": "name=1? mountPath=2? readOnly=3:bool recursiveReadOnly=4? volumeStatus=5:VolumeStatus",
        "VolumeStatus": "image=1:ImageVolumeStatus",
        "ImageVolumeStatus": "imageRef=1",
        "ContainerUser": "linux=1:LinuxContainerUser",
        "LinuxContainerUser": "uid=1:int? gid=2:int? supplementalGroups=3:[int]",
    },
)
