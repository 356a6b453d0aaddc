"""Protobuf table: the ``v1`` Pod and pod template: spec, containers, probes, security, scheduling.

Deployments and ReplicaSets carry a ``PodTemplateSpec``, so ``kubectl create deployment`` needs
these too. Volumes are in ``volumes_v1``, the pod status in ``pod_status_v1``.
"""

from __future__ import annotations

from epp_sim.apiserver.protobuf.messages import Part

__all__ = ["PART"]

_CONTAINER = """name=1? image=2 command=3:[string] args=4:[string] workingDir=5 ports=6:[ContainerPort]
    env=7:[EnvVar] resources=8:ResourceRequirements volumeMounts=9:[VolumeMount] livenessProbe=10:Probe
    readinessProbe=11:Probe lifecycle=12:Lifecycle terminationMessagePath=13 imagePullPolicy=14
    securityContext=15:SecurityContext stdin=16:bool stdinOnce=17:bool tty=18:bool envFrom=19:[EnvFromSource]
    terminationMessagePolicy=20 volumeDevices=21:[VolumeDevice] startupProbe=22:Probe
    resizePolicy=23:[ContainerResizePolicy] restartPolicy=24? restartPolicyRules=25:[ContainerRestartRule]"""
"""``Container``, and ``EphemeralContainerCommon``, which has the same fields under the same numbers."""

_AFFINITY_TERMS = """requiredDuringSchedulingIgnoredDuringExecution=1:[PodAffinityTerm]
    preferredDuringSchedulingIgnoredDuringExecution=2:[WeightedPodAffinityTerm]"""
_OPTIONAL_REF = "..=1:LocalObjectReference optional=2:bool?"
_KEY_REF = "..=1:LocalObjectReference key=2? optional=3:bool?"
_HANDLER = "exec=1:ExecAction httpGet=2:HTTPGetAction tcpSocket=3:TCPSocketAction"
_PROFILE = "type=1? localhostProfile=2?"

PART = Part(
    messages={
        "Pod": "metadata=1:ObjectMeta spec=2:PodSpec status=3:PodStatus",
        "PodTemplateSpec": "metadata=1:ObjectMeta spec=2:PodSpec",
        "PodSpec": """volumes=1:[Volume] containers=2:[Container] restartPolicy=3 terminationGracePeriodSeconds=4:int?
            activeDeadlineSeconds=5:int? dnsPolicy=6 nodeSelector=7:{string} serviceAccountName=8 serviceAccount=9
            nodeName=10 hostNetwork=11:bool hostPID=12:bool hostIPC=13:bool securityContext=14:PodSecurityContext
            imagePullSecrets=15:[LocalObjectReference] hostname=16 subdomain=17 affinity=18:Affinity schedulerName=19
            initContainers=20:[Container] automountServiceAccountToken=21:bool? tolerations=22:[Toleration]
            hostAliases=23:[HostAlias] priorityClassName=24 priority=25:int? dnsConfig=26:PodDNSConfig
            shareProcessNamespace=27:bool? readinessGates=28:[PodReadinessGate] runtimeClassName=29?
            enableServiceLinks=30:bool? preemptionPolicy=31? overhead=32:{Quantity}
            topologySpreadConstraints=33:[TopologySpreadConstraint] ephemeralContainers=34:[EphemeralContainer]
            setHostnameAsFQDN=35:bool? os=36:PodOS hostUsers=37:bool? schedulingGates=38:[PodSchedulingGate]
            resourceClaims=39:[PodResourceClaim] resources=40:ResourceRequirements hostnameOverride=41?
            schedulingGroup=43:PodSchedulingGroup evictionResponders=44:[EvictionResponder]""",
        "Container": _CONTAINER,
        "EphemeralContainer": "..=1:EphemeralContainerCommon targetContainerName=2",
        "EphemeralContainerCommon": _CONTAINER,
        "ContainerPort": "name=1 hostPort=2:int containerPort=3:int? protocol=4 hostIP=5",
        "EnvVar": "name=1? value=2 valueFrom=3:EnvVarSource",
        "EnvVarSource": """fieldRef=1:ObjectFieldSelector resourceFieldRef=2:ResourceFieldSelector
            configMapKeyRef=3:ConfigMapKeySelector secretKeyRef=4:SecretKeySelector fileKeyRef=5:FileKeySelector""",
        "ObjectFieldSelector": "apiVersion=1 fieldPath=2?",
        "ResourceFieldSelector": "containerName=1 resource=2? divisor=3:Quantity",
        "ConfigMapKeySelector": _KEY_REF,
        "SecretKeySelector": _KEY_REF,
        "FileKeySelector": "volumeName=1? path=2? key=3? optional=4:bool?",
        "EnvFromSource": "prefix=1 configMapRef=2:ConfigMapEnvSource secretRef=3:SecretEnvSource",
        "ConfigMapEnvSource": _OPTIONAL_REF,
        "SecretEnvSource": _OPTIONAL_REF,
        "ResourceRequirements": "limits=1:{Quantity} requests=2:{Quantity} claims=3:[ResourceClaim]",
        "ResourceClaim": "name=1? request=2",
        "VolumeMount": """name=1? readOnly=2:bool mountPath=3? subPath=4 mountPropagation=5? subPathExpr=6
            recursiveReadOnly=7? bindMountOptions=8:[string]""",
        "VolumeDevice": "name=1? devicePath=2?",
        "Probe": """..=1:ProbeHandler initialDelaySeconds=2:int timeoutSeconds=3:int periodSeconds=4:int
            successThreshold=5:int failureThreshold=6:int terminationGracePeriodSeconds=7:int?""",
        "ProbeHandler": f"{_HANDLER} grpc=4:GRPCAction",
        "ExecAction": "command=1:[string]",
        "HTTPGetAction": "path=1 port=2:IntOrString host=3 scheme=4 httpHeaders=5:[HTTPHeader] protocol=6?",
        "HTTPHeader": "name=1? value=2?",
        "TCPSocketAction": "port=1:IntOrString host=2",
        "GRPCAction": "port=1:int? service=2? mode=3?",
        "Lifecycle": "postStart=1:LifecycleHandler preStop=2:LifecycleHandler stopSignal=3?",
        "LifecycleHandler": f"{_HANDLER} sleep=4:SleepAction",
        "SleepAction": "seconds=1:int?",
        "SecurityContext": """capabilities=1:Capabilities privileged=2:bool? seLinuxOptions=3:SELinuxOptions
            runAsUser=4:int? runAsNonRoot=5:bool? readOnlyRootFilesystem=6:bool? allowPrivilegeEscalation=7:bool?
            runAsGroup=8:int? procMount=9? windowsOptions=10:WindowsSecurityContextOptions
            seccompProfile=11:SeccompProfile appArmorProfile=12:AppArmorProfile""",
        "Capabilities": "add=1:[string] drop=2:[string]",
        "SELinuxOptions": "user=1 role=2 type=3 level=4",
        "WindowsSecurityContextOptions": """gmsaCredentialSpecName=1? gmsaCredentialSpec=2? runAsUserName=3?
            hostProcess=4:bool?""",
        "SeccompProfile": _PROFILE,
        "AppArmorProfile": _PROFILE,
        "ContainerResizePolicy": "resourceName=1? restartPolicy=2?",
        "ContainerRestartRule": "action=1 exitCodes=2:ContainerRestartRuleOnExitCodes",
        "ContainerRestartRuleOnExitCodes": "operator=1 values=2:[int]",
        "PodSecurityContext": """seLinuxOptions=1:SELinuxOptions runAsUser=2:int? runAsNonRoot=3:bool?
            supplementalGroups=4:[int] fsGroup=5:int? runAsGroup=6:int? sysctls=7:[Sysctl]
            windowsOptions=8:WindowsSecurityContextOptions fsGroupChangePolicy=9? seccompProfile=10:SeccompProfile
            appArmorProfile=11:AppArmorProfile supplementalGroupsPolicy=12? seLinuxChangePolicy=13?""",
        "Sysctl": "name=1? value=2?",
        "Affinity": "nodeAffinity=1:NodeAffinity podAffinity=2:PodAffinity podAntiAffinity=3:PodAntiAffinity",
        "NodeAffinity": """requiredDuringSchedulingIgnoredDuringExecution=1:NodeSelector
            preferredDuringSchedulingIgnoredDuringExecution=2:[PreferredSchedulingTerm]""",
        "NodeSelector": "nodeSelectorTerms=1:[NodeSelectorTerm]",
        "NodeSelectorTerm": "matchExpressions=1:[NodeSelectorRequirement] matchFields=2:[NodeSelectorRequirement]",
        "NodeSelectorRequirement": "key=1? operator=2? values=3:[string]",
        "PreferredSchedulingTerm": "weight=1:int? preference=2:NodeSelectorTerm",
        "PodAffinity": _AFFINITY_TERMS,
        "PodAntiAffinity": _AFFINITY_TERMS,
        "PodAffinityTerm": """labelSelector=1:LabelSelector namespaces=2:[string] topologyKey=3?
            namespaceSelector=4:LabelSelector matchLabelKeys=5:[string] mismatchLabelKeys=6:[string]""",
        "WeightedPodAffinityTerm": "weight=1:int? podAffinityTerm=2:PodAffinityTerm",
        "Toleration": "key=1 operator=2 value=3 effect=4 tolerationSeconds=5:int?",
        "HostAlias": "ip=1? hostnames=2:[string]",
        "PodDNSConfig": "nameservers=1:[string] searches=2:[string] options=3:[PodDNSConfigOption]",
        "PodDNSConfigOption": "name=1 value=2?",
        "PodReadinessGate": "conditionType=1?",
        "TopologySpreadConstraint": """maxSkew=1:int? topologyKey=2? whenUnsatisfiable=3? labelSelector=4:LabelSelector
            minDomains=5:int? nodeAffinityPolicy=6? nodeTaintsPolicy=7? matchLabelKeys=8:[string]""",
        "PodOS": "name=1?",
        "PodSchedulingGate": "name=1?",
        "PodResourceClaim": "name=1? resourceClaimName=3? resourceClaimTemplateName=4?",
        "PodSchedulingGroup": "podGroupName=1?",
        "EvictionResponder": "name=1? priority=2:int?",
    },
    kinds=(("v1", "Pod"),),
)
