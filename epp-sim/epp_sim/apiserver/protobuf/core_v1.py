"""Protobuf table: the ``v1`` kinds other than Pod (Namespace, ConfigMap, Secret, ServiceAccount, Service).

What ``kubectl create namespace|configmap|secret|serviceaccount|service`` send. The Pod and the
types a pod template is made of are in ``pod_v1``.
"""

from __future__ import annotations

from epp_sim.apiserver.protobuf.messages import Part

__all__ = ["PART"]

PART = Part(
    messages={
        "Namespace": "metadata=1:ObjectMeta spec=2:NamespaceSpec status=3:NamespaceStatus",
        "NamespaceSpec": "finalizers=1:[string]",
        "NamespaceStatus": "phase=1 conditions=2:[NamespaceCondition]",
        "NamespaceCondition": "type=1? status=2? lastTransitionTime=4:Time reason=5 message=6",
        "ConfigMap": "metadata=1:ObjectMeta data=2:{string} binaryData=3:{bytes} immutable=4:bool?",
        "Secret": "metadata=1:ObjectMeta data=2:{bytes} type=3 stringData=4:{string} immutable=5:bool?",
        "ServiceAccount": """metadata=1:ObjectMeta secrets=2:[ObjectReference] imagePullSecrets=3:[LocalObjectReference]
            automountServiceAccountToken=4:bool?""",
        "ObjectReference": "kind=1 namespace=2 name=3 uid=4 apiVersion=5 resourceVersion=6 fieldPath=7",
        "LocalObjectReference": "name=1",
        "Service": "metadata=1:ObjectMeta spec=2:ServiceSpec status=3:ServiceStatus",
        "ServiceSpec": """ports=1:[ServicePort] selector=2:{string} clusterIP=3 type=4 externalIPs=5:[string]
            sessionAffinity=7 loadBalancerIP=8 loadBalancerSourceRanges=9:[string] externalName=10
            externalTrafficPolicy=11 healthCheckNodePort=12:int publishNotReadyAddresses=13:bool
            sessionAffinityConfig=14:SessionAffinityConfig ipFamilyPolicy=17? clusterIPs=18:[string]
            ipFamilies=19:[string] allocateLoadBalancerNodePorts=20:bool? loadBalancerClass=21?
            internalTrafficPolicy=22? trafficDistribution=23?""",
        "ServicePort": "name=1 protocol=2 port=3:int? targetPort=4:IntOrString nodePort=5:int appProtocol=6?",
        "SessionAffinityConfig": "clientIP=1:ClientIPConfig",
        "ClientIPConfig": "timeoutSeconds=1:int?",
        "ServiceStatus": "loadBalancer=1:LoadBalancerStatus conditions=2:[Condition]",
        "LoadBalancerStatus": "ingress=1:[LoadBalancerIngress]",
        "LoadBalancerIngress": "ip=1 hostname=2 ipMode=3? ports=4:[PortStatus]",
        "PortStatus": "port=1:int? protocol=2? error=3?",
    },
    kinds=(
        ("v1", "Namespace"),
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "ServiceAccount"),
        ("v1", "Service"),
    ),
)
