"""The authentication and authorization APIs: TokenRequest, TokenReview and SubjectAccessReview.

What a component that delegates its auth to the API server calls (controller-runtime's metrics
filter, kube-rbac-proxy, our picker's ``/metrics`` guard): ``POST
/apis/authentication.k8s.io/v1/tokenreviews`` says who a bearer token is; ``POST
/apis/authorization.k8s.io/v1/subjectaccessreviews`` says whether that user may do a verb on a
resource or a non-resource URL. ``POST .../serviceaccounts/<name>/token`` mints the tokens (the
request decoded from JSON or, as ``kubectl create token`` sends it, protobuf). Reviews are answered from the request and
the store (201 with ``status`` filled) and never stored, like the real server's. The server itself
stays anonymous: it authorizes nobody's requests, it only answers these questions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epp_sim.apiserver.authorizer import Attributes, authorize
from epp_sim.apiserver.builtin_schemas import wrap
from epp_sim.apiserver.errors import ApiError, invalid
from epp_sim.apiserver.kinds import Obj, ResourceType
from epp_sim.apiserver.schema import arr, boolean, obj, string, validate
from epp_sim.apiserver.tokens import TokenAuthority, TokenInvalidError

if TYPE_CHECKING:  # builtin_kinds imports review_types from here; the store imports builtin_kinds
    from epp_sim.apiserver.store import Store

__all__ = ["Reviews", "review_types"]

AUTHN_GROUP = "authentication.k8s.io"
AUTHZ_GROUP = "authorization.k8s.io"


def _strings() -> Obj:
    return arr(string(), list_type="atomic")


def _extra() -> Obj:
    return {"type": "object", "additionalProperties": _strings()}


def _token_review_schema() -> Obj:
    user = obj({"username": string(), "uid": string(), "groups": _strings(), "extra": _extra()})
    return wrap(
        obj({"token": string(), "audiences": _strings()}),
        obj({"authenticated": boolean(), "user": user, "audiences": _strings(), "error": string()}),
    )


def _subject_access_review_schema() -> Obj:
    resource = obj(
        {key: string() for key in ("namespace", "verb", "group", "version", "resource", "subresource", "name")}
    )
    spec = obj(
        {
            "resourceAttributes": resource,
            "nonResourceAttributes": obj({"path": string(), "verb": string()}),
            "user": string(),
            "groups": _strings(),
            "extra": _extra(),
            "uid": string(),
        }
    )
    status = obj({"allowed": boolean(), "denied": boolean(), "reason": string(), "evaluationError": string()})
    return wrap(spec, status)


def review_types() -> list[ResourceType]:
    """TokenReview and SubjectAccessReview: cluster-scoped, create-only, never stored."""
    return [
        ResourceType(
            AUTHN_GROUP,
            ("v1",),
            "TokenReview",
            "tokenreviews",
            "tokenreview",
            False,
            {"v1": _token_review_schema()},
            tracks_generation=False,
            openapi_name="io.k8s.api.authentication.v1.TokenReview",
            review=True,
        ),
        ResourceType(
            AUTHZ_GROUP,
            ("v1",),
            "SubjectAccessReview",
            "subjectaccessreviews",
            "subjectaccessreview",
            False,
            {"v1": _subject_access_review_schema()},
            tracks_generation=False,
            openapi_name="io.k8s.api.authorization.v1.SubjectAccessReview",
            review=True,
        ),
    ]


class Reviews:
    """Answers the three APIs over one store; owns the key its tokens are signed with."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.tokens = TokenAuthority(store)

    def token_request(self, namespace: str, name: str, body: Obj) -> Obj:
        """``POST .../serviceaccounts/<name>/token``: a TokenRequest with ``status.token`` filled."""
        return self.tokens.request(namespace, name, body)

    def answer(self, rt: ResourceType, body: Obj) -> Obj:
        """The review in ``body`` with its ``status`` filled in."""
        name = str((body.get("metadata") or {}).get("name") or "")
        causes = validate(rt.schemas["v1"], body)
        if causes:
            raise invalid(rt.kind, rt.group, name, causes)
        spec: Obj = body.get("spec") or {}
        status = self._token_review(spec) if rt.kind == "TokenReview" else self._access_review(rt, name, spec)
        meta = {**(body.get("metadata") or {}), "creationTimestamp": None}
        return {"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": meta, "spec": spec, "status": status}

    def _token_review(self, spec: Obj) -> Obj:
        token = str(spec.get("token") or "")
        if not token:
            raise ApiError(400, "BadRequest", "token is required for TokenReview in authentication")
        try:
            found = self.tokens.authenticate(token, [str(a) for a in spec.get("audiences") or []])
        except TokenInvalidError as e:
            return {"user": {}, "error": str(e)}
        return {"authenticated": True, "user": found.user.as_json(), "audiences": found.audiences}

    def _access_review(self, rt: ResourceType, name: str, spec: Obj) -> Obj:
        resource: Obj | None = spec.get("resourceAttributes")
        non_resource: Obj | None = spec.get("nonResourceAttributes")
        causes: list[tuple[str, str, str]] = []
        if resource is not None and non_resource is not None:
            causes.append(
                (
                    "spec.nonResourceAttributes",
                    "FieldValueInvalid",
                    "Invalid value: cannot be specified in combination with resourceAttributes",
                )
            )
        if resource is None and non_resource is None:
            causes.append(
                (
                    "spec.resourceAttributes",
                    "FieldValueInvalid",
                    "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )
            )
        if not spec.get("user") and not spec.get("groups"):
            causes.append(
                ("spec.user", "FieldValueInvalid", 'Invalid value: "": at least one of user or group must be specified')
            )
        if causes:
            raise invalid(rt.kind, rt.group, name, causes)
        user, groups = str(spec.get("user") or ""), tuple(str(g) for g in spec.get("groups") or [])
        if resource is not None:
            attrs = Attributes(
                user,
                groups,
                str(resource.get("verb") or ""),
                resource_request=True,
                namespace=str(resource.get("namespace") or ""),
                group=str(resource.get("group") or ""),
                resource=str(resource.get("resource") or ""),
                subresource=str(resource.get("subresource") or ""),
                name=str(resource.get("name") or ""),
            )
        else:
            url: Obj = non_resource or {}
            attrs = Attributes(
                user, groups, str(url.get("verb") or ""), resource_request=False, path=str(url.get("path") or "")
            )
        decision = authorize(self.store, attrs)
        return {"allowed": decision.allowed, **({"reason": decision.reason} if decision.reason else {})}
