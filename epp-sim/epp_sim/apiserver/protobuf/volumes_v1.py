"""Protobuf table: ``v1`` pod volumes: the sources a pod mounts, and the ephemeral claim template.

The in-tree plugins Kubernetes deprecated for CSI (``awsElasticBlockStore``, ``gcePersistentDisk``,
``gitRepo``, ``rbd``, …) are named (``-``) but not decoded: a body using one is refused with a
400 that names the field.
"""

from __future__ import annotations

from epp_sim.apiserver.protobuf.messages import Part

__all__ = ["PART"]

_KEYS = "..=1:LocalObjectReference items=2:[KeyToPath]"

PART = Part(
    messages={
        "Volume": "name=1? ..=2:VolumeSource",
        "VolumeSource": """hostPath=1:HostPathVolumeSource emptyDir=2:EmptyDirVolumeSource gcePersistentDisk=3:-
            awsElasticBlockStore=4:- gitRepo=5:- secret=6:SecretVolumeSource nfs=7:NFSVolumeSource iscsi=8:-
            glusterfs=9:- persistentVolumeClaim=10:PersistentVolumeClaimVolumeSource rbd=11:- flexVolume=12:-
            cinder=13:- cephfs=14:- flocker=15:- downwardAPI=16:DownwardAPIVolumeSource fc=17:- azureFile=18:-
            configMap=19:ConfigMapVolumeSource vsphereVolume=20:- quobyte=21:- azureDisk=22:-
            photonPersistentDisk=23:- portworxVolume=24:- scaleIO=25:- projected=26:ProjectedVolumeSource
            storageos=27:- csi=28:CSIVolumeSource ephemeral=29:EphemeralVolumeSource image=30:ImageVolumeSource""",
        "HostPathVolumeSource": "path=1? type=2?",
        "EmptyDirVolumeSource": "medium=1 sizeLimit=2:Quantity mode=3:int?",
        "SecretVolumeSource": "secretName=1 items=2:[KeyToPath] defaultMode=3:int? optional=4:bool? defaultUser=5:int?",
        "ConfigMapVolumeSource": f"{_KEYS} defaultMode=3:int? optional=4:bool? defaultUser=5:int?",
        "KeyToPath": "key=1? path=2? mode=3:int? user=4:int?",
        "NFSVolumeSource": "server=1? path=2? readOnly=3:bool",
        "PersistentVolumeClaimVolumeSource": "claimName=1? readOnly=2:bool",
        "DownwardAPIVolumeSource": "items=1:[DownwardAPIVolumeFile] defaultMode=2:int? defaultUser=3:int?",
        "DownwardAPIVolumeFile": """path=1? fieldRef=2:ObjectFieldSelector resourceFieldRef=3:ResourceFieldSelector
            mode=4:int? user=5:int?""",
        "ProjectedVolumeSource": "sources=1:[VolumeProjection] defaultMode=2:int? defaultUser=3:int?",
        "VolumeProjection": """secret=1:SecretProjection downwardAPI=2:DownwardAPIProjection
            configMap=3:ConfigMapProjection serviceAccountToken=4:ServiceAccountTokenProjection
            clusterTrustBundle=5:ClusterTrustBundleProjection podCertificate=6:PodCertificateProjection""",
        "SecretProjection": f"{_KEYS} optional=4:bool?",
        "ConfigMapProjection": f"{_KEYS} optional=4:bool?",
        "DownwardAPIProjection": "items=1:[DownwardAPIVolumeFile]",
        "ServiceAccountTokenProjection": "audience=1 expirationSeconds=2:int? path=3? user=4:int?",
        "ClusterTrustBundleProjection": """name=1? signerName=2? labelSelector=3:LabelSelector path=4? optional=5:bool?
            user=6:int?""",
        "PodCertificateProjection": """signerName=1 keyType=2 maxExpirationSeconds=3:int? credentialBundlePath=4
            keyPath=5 certificateChainPath=6 userAnnotations=7:{string} user=8:int?""",
        "CSIVolumeSource": """driver=1? readOnly=2:bool? fsType=3? volumeAttributes=4:{string}
            nodePublishSecretRef=5:LocalObjectReference""",
        "EphemeralVolumeSource": "volumeClaimTemplate=1:PersistentVolumeClaimTemplate",
        "PersistentVolumeClaimTemplate": "metadata=1:ObjectMeta spec=2:PersistentVolumeClaimSpec",
        "PersistentVolumeClaimSpec": """accessModes=1:[string] resources=2:VolumeResourceRequirements volumeName=3
            selector=4:LabelSelector storageClassName=5? volumeMode=6? dataSource=7:TypedLocalObjectReference
            dataSourceRef=8:TypedObjectReference volumeAttributesClassName=9?""",
        "VolumeResourceRequirements": "limits=1:{Quantity} requests=2:{Quantity}",
        "TypedLocalObjectReference": "apiGroup=1? kind=2? name=3?",
        "TypedObjectReference": "apiGroup=1? kind=2? name=3? namespace=4?",
        "ImageVolumeSource": "reference=1 pullPolicy=2",
    },
)
