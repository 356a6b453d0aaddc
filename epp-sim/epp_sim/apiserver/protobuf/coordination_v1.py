"""Protobuf table: ``coordination.k8s.io/v1`` Lease (leader election through client-go's typed client)."""

from __future__ import annotations

from epp_sim.apiserver.protobuf.messages import Part

__all__ = ["PART"]

PART = Part(
    messages={
        "Lease": "metadata=1:ObjectMeta spec=2:LeaseSpec",
        "LeaseSpec": """holderIdentity=1? leaseDurationSeconds=2:int? acquireTime=3:MicroTime renewTime=4:MicroTime
            leaseTransitions=5:int? strategy=6? preferredHolder=7?""",
    },
    kinds=(("coordination.k8s.io/v1", "Lease"),),
)
