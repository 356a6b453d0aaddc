"""Protobuf table: ``authentication.k8s.io/v1`` (TokenRequest, TokenReview) and ``authorization.k8s.io/v1``.

``kubectl create token`` sends its TokenRequest as protobuf; a component delegating its auth may
send its reviews so. ``ExtraValue`` (and ``AttestationValue``) are lists in JSON.
"""

from __future__ import annotations

from typing import Any

from epp_sim.apiserver.protobuf.messages import Part

__all__ = ["PART"]


def _items(fields: dict[str, Any]) -> list[Any]:
    return list(fields.get("items", []))


PART = Part(
    messages={
        "TokenRequest": "metadata=1:ObjectMeta spec=2:TokenRequestSpec status=3:TokenRequestStatus",
        "TokenRequestSpec": """audiences=1:[string] boundObjectRef=3:BoundObjectReference expirationSeconds=4:int?
            attestations=5:{AttestationValue}""",
        "BoundObjectReference": "kind=1 apiVersion=2 name=3 uid=4",
        "AttestationValue": "items=1:[string]",
        "TokenRequestStatus": "token=1? expirationTimestamp=2:Time",
        "TokenReview": "metadata=1:ObjectMeta spec=2:TokenReviewSpec status=3:TokenReviewStatus",
        "TokenReviewSpec": "token=1 audiences=2:[string]",
        "TokenReviewStatus": "authenticated=1:bool user=2:UserInfo error=3 audiences=4:[string]",
        "UserInfo": "username=1 uid=2 groups=3:[string] extra=4:{ExtraValue}",
        "ExtraValue": "items=1:[string]",
        "SubjectAccessReview": """metadata=1:ObjectMeta spec=2:SubjectAccessReviewSpec
            status=3:SubjectAccessReviewStatus""",
        "SubjectAccessReviewSpec": """resourceAttributes=1:ResourceAttributes
            nonResourceAttributes=2:NonResourceAttributes user=3 groups=4:[string] extra=5:{ExtraValue} uid=6""",
        "ResourceAttributes": """namespace=1 verb=2 group=3 version=4 resource=5 subresource=6 name=7
            fieldSelector=8:FieldSelectorAttributes labelSelector=9:LabelSelectorAttributes""",
        "FieldSelectorAttributes": "rawSelector=1 requirements=2:[FieldSelectorRequirement]",
        "FieldSelectorRequirement": "key=1? operator=2? values=3:[string]",
        "LabelSelectorAttributes": "rawSelector=1 requirements=2:[LabelSelectorRequirement]",
        "NonResourceAttributes": "path=1 verb=2",
        "SubjectAccessReviewStatus": "allowed=1:bool? reason=2 evaluationError=3 denied=4:bool",
    },
    forms={"ExtraValue": _items, "AttestationValue": _items},
    kinds=(
        ("authentication.k8s.io/v1", "TokenRequest"),
        ("authentication.k8s.io/v1", "TokenReview"),
        ("authorization.k8s.io/v1", "SubjectAccessReview"),
    ),
)
