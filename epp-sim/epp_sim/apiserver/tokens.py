"""ServiceAccount tokens: minted by TokenRequest (``kubectl create token``), checked by TokenReview.

Tokens are JWTs with the claims the real server writes (``iss``, ``sub``, ``aud``, ``exp``,
``iat``, ``nbf``, ``jti`` and ``kubernetes.io`` naming the namespace, the ServiceAccount and the
bound object), signed with HS256 and a key each :class:`TokenAuthority` makes for itself: nothing
outside the server verifies them. A minted token authenticates while its signature holds, it has
not expired, one of its audiences is one the review asks for (the API server's own when the
review names none), and its ServiceAccount and bound object still exist with the uids it names.

Tokens of ``kubernetes.io/service-account-token`` Secrets (written into the Secret on create, as
the real token controller does) never expire and are valid while the Secret still holds exactly
that token and its ServiceAccount exists. They are checked against the store, not the key, so
they stay valid across a restart with ``--data-dir``; minted tokens do not (the key is new).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from epp_sim.apiserver.errors import ApiError, conflict, invalid, not_found
from epp_sim.apiserver.kinds import Obj
from epp_sim.apiserver.timefmt import rfc3339

if TYPE_CHECKING:  # the store's Secret kind imports legacy_token from here
    from epp_sim.apiserver.store import Store

__all__ = [
    "API_AUDIENCE",
    "SA_NAME_ANNOTATION",
    "SA_UID_ANNOTATION",
    "Authenticated",
    "TokenAuthority",
    "TokenInvalidError",
    "UserInfo",
    "legacy_token",
]

API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
"""The issuer, and the audience of tokens (and reviews) that name none, as on a kubeadm cluster."""
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"
SA_UID_ANNOTATION = "kubernetes.io/service-account.uid"
_LEGACY_ISSUER = "kubernetes/serviceaccount"
_LEGACY = "kubernetes.io/serviceaccount/"
_AUTH_GROUP = "authentication.k8s.io"
_DEFAULT_SECONDS = 3600
_MIN_SECONDS = 600
_BINDABLE = ("Pod", "Secret")


class TokenInvalidError(Exception):
    """The token does not authenticate anyone; the message is the review's ``status.error``."""


@dataclass(frozen=True, slots=True)
class UserInfo:
    """Who a token authenticates, as ``TokenReview.status.user`` and ``SubjectAccessReview.spec`` carry it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, list[str]] = field(default_factory=dict)

    def as_json(self) -> Obj:
        body: Obj = {"username": self.username, "uid": self.uid, "groups": list(self.groups)}
        if self.extra:
            body["extra"] = {k: list(v) for k, v in self.extra.items()}
        return body


@dataclass(frozen=True, slots=True)
class Authenticated:
    user: UserInfo
    audiences: list[str]


def service_account_user(namespace: str, name: str, uid: str, extra: Mapping[str, list[str]] | None = None) -> UserInfo:
    """The user a ServiceAccount's token authenticates: its name and the three groups every SA is in."""
    return UserInfo(
        f"system:serviceaccount:{namespace}:{name}",
        uid,
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        extra or {},
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _encode(claims: Obj, key: bytes) -> str:
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    signature = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(signature)}"


def legacy_token(namespace: str, secret_name: str, service_account: str) -> str:
    """A fresh token for a service-account-token Secret (claims as the real token controller writes)."""
    claims = {
        "iss": _LEGACY_ISSUER,
        f"{_LEGACY}namespace": namespace,
        f"{_LEGACY}secret.name": secret_name,
        f"{_LEGACY}service-account.name": service_account,
        "sub": f"system:serviceaccount:{namespace}:{service_account}",
    }
    return _encode(claims, secrets.token_bytes(32))  # checked against the Secret, never the key


class TokenAuthority:
    """Mints tokens for the ServiceAccounts of one store and authenticates tokens presented to it."""

    def __init__(self, store: Store, *, key: bytes | None = None) -> None:
        self._store = store
        self._key = key or secrets.token_bytes(32)

    # ------------------------------------------------------------------------------ minting

    def request(self, namespace: str, name: str, body: Obj) -> Obj:
        """Answer a TokenRequest for ServiceAccount ``namespace/name``: the request with spec and status filled."""
        account = self._store.lookup(self._store.type_of("ServiceAccount"), name, namespace)
        if account is None:
            raise not_found("serviceaccounts", "", name)
        spec: Obj = body.get("spec") or {}
        if not isinstance(spec, dict) or not isinstance(spec.get("boundObjectRef") or {}, dict):
            raise ApiError(400, "BadRequest", "a TokenRequest's spec and spec.boundObjectRef must be objects")
        seconds = spec.get("expirationSeconds") or _DEFAULT_SECONDS
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise ApiError(400, "BadRequest", f"spec.expirationSeconds: {seconds!r} is not an integer")
        if not _MIN_SECONDS <= seconds <= 2**32:
            why = "less than 10 minutes" if seconds < _MIN_SECONDS else "larger than 2^32"
            raise invalid(
                "TokenRequest",
                _AUTH_GROUP,
                name,
                [
                    (
                        "spec.expirationSeconds",
                        "FieldValueInvalid",
                        f"Invalid value: {seconds!r}: may not specify a duration {why}",
                    )
                ],
            )
        audiences = [str(a) for a in spec.get("audiences") or []] or [API_AUDIENCE]
        binding: Obj = {"serviceaccount": {"name": name, "uid": account["metadata"]["uid"]}}
        ref = spec.get("boundObjectRef")
        if ref:
            bound = self._bound_object(namespace, name, ref)
            binding[str(ref["kind"]).lower()] = {"name": bound["metadata"]["name"], "uid": bound["metadata"]["uid"]}
        now = int(self._store.clock.wall())
        claims: Obj = {
            "aud": audiences,
            "exp": now + seconds,
            "iat": now,
            "iss": API_AUDIENCE,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {"namespace": namespace, **binding},
            "nbf": now,
            "sub": f"system:serviceaccount:{namespace}:{name}",
        }
        return {
            "kind": "TokenRequest",
            "apiVersion": f"{_AUTH_GROUP}/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": {**spec, "audiences": audiences, "expirationSeconds": seconds},
            "status": {"token": _encode(claims, self._key), "expirationTimestamp": rfc3339(now + seconds)},
        }

    def _bound_object(self, namespace: str, account: str, ref: Obj) -> Obj:
        kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        if kind not in _BINDABLE or str(ref.get("apiVersion") or "v1") != "v1":
            raise ApiError(
                400, "BadRequest", f"cannot bind token to object of type {ref.get('apiVersion')}, Kind={kind}"
            )
        found = self._store.lookup(self._store.type_of(kind), name, namespace)
        if found is None:
            plural = f"{kind.lower()}s"
            raise ApiError(
                400,
                "BadRequest",
                f'cannot bind token for serviceaccount "{account}" to {kind.lower()} "{name}": '
                f'{plural} "{name}" not found',
            )
        if kind == "Pod" and ((found.get("spec") or {}).get("serviceAccountName") or "default") != account:
            raise ApiError(
                400,
                "BadRequest",
                f'cannot bind token for serviceaccount "{account}" to pod running with different serviceaccount name.',
            )
        uid = found["metadata"]["uid"]
        if ref.get("uid") and ref["uid"] != uid:
            raise conflict(
                kind,
                "",
                name,
                f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. "
                "The object might have been deleted and then recreated",
            )
        return found

    # ------------------------------------------------------------------------ authenticating

    def authenticate(self, token: str, audiences: Sequence[str]) -> Authenticated:
        """Who ``token`` is, for a review asking for ``audiences``; raises :class:`TokenInvalidError`."""
        try:
            head, body, signature = token.split(".")
            claims = json.loads(_unb64(body))
            given = _unb64(signature)
        except (ValueError, binascii.Error):
            raise TokenInvalidError("[invalid bearer token, token lookup failed]") from None
        if not isinstance(claims, dict):
            raise TokenInvalidError("[invalid bearer token, token lookup failed]")
        wanted = list(audiences) or [API_AUDIENCE]
        if claims.get("iss") == _LEGACY_ISSUER:
            user = self._legacy_user(token, claims)
            token_audiences = [API_AUDIENCE]
        else:
            expected = hmac.new(self._key, f"{head}.{body}".encode(), hashlib.sha256).digest()
            if not hmac.compare_digest(expected, given):
                raise TokenInvalidError("[invalid bearer token, square/go-jose: error in cryptographic primitive]")
            user = self._bound_user(claims)
            token_audiences = [str(a) for a in claims.get("aud") or []]
        matched = [a for a in wanted if a in token_audiences]
        if not matched:
            raise TokenInvalidError(
                f"[invalid bearer token, token audiences {token_audiences} is invalid "
                f"for the target audiences {wanted}]"
            )
        return Authenticated(user, matched)

    def _account(self, namespace: str, name: str, uid: str | None) -> Obj:
        account = self._store.lookup(self._store.type_of("ServiceAccount"), name, namespace)
        if account is None:
            raise TokenInvalidError(f'[invalid bearer token, serviceaccounts "{name}" not found]')
        if uid and account["metadata"]["uid"] != uid:
            raise TokenInvalidError(
                f"[invalid bearer token, service account UID ({uid}) does not match claim "
                f"({account['metadata']['uid']})]"
            )
        return account

    def _bound_user(self, claims: Obj) -> UserInfo:
        now = self._store.clock.wall()
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= now:
            raise TokenInvalidError("[invalid bearer token, service account token has expired]")
        scope = claims.get("kubernetes.io") or {}
        namespace = str(scope.get("namespace") or "")
        account_ref = scope.get("serviceaccount") or {}
        account = self._account(namespace, str(account_ref.get("name") or ""), str(account_ref.get("uid") or ""))
        extra: dict[str, list[str]] = {"authentication.kubernetes.io/credential-id": [f"JTI={claims.get('jti')}"]}
        for kind in _BINDABLE:
            ref = scope.get(kind.lower())
            if not ref:
                continue
            bound = self._store.lookup(self._store.type_of(kind), str(ref.get("name")), namespace)
            if bound is None or bound["metadata"]["uid"] != ref.get("uid"):
                raise TokenInvalidError(
                    f'[invalid bearer token, {kind.lower()}s "{ref.get("name")}" not found or has a new UID]'
                )
            if kind == "Pod":
                extra["authentication.kubernetes.io/pod-name"] = [str(ref["name"])]
                extra["authentication.kubernetes.io/pod-uid"] = [str(ref["uid"])]
        meta = account["metadata"]
        return service_account_user(namespace, meta["name"], meta["uid"], extra)

    def _legacy_user(self, token: str, claims: Obj) -> UserInfo:
        namespace = str(claims.get(f"{_LEGACY}namespace") or "")
        secret_name = str(claims.get(f"{_LEGACY}secret.name") or "")
        secret = self._store.lookup(self._store.type_of("Secret"), secret_name, namespace)
        stored = ((secret or {}).get("data") or {}).get("token", "")
        if secret is None or not hmac.compare_digest(stored, base64.b64encode(token.encode()).decode()):
            raise TokenInvalidError(f'[invalid bearer token, secrets "{secret_name}" not found or holds another token]')
        annotations = secret["metadata"].get("annotations") or {}
        name = str(annotations.get(SA_NAME_ANNOTATION) or "")
        meta = self._account(namespace, name, annotations.get(SA_UID_ANNOTATION))["metadata"]
        return service_account_user(namespace, meta["name"], meta["uid"])
