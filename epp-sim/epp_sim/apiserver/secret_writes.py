"""What the real server, and its ServiceAccount token controller, do when a Secret is written.

``stringData`` is merged into ``data`` (base64) and dropped; ``data`` values must be base64;
``type`` defaults to ``Opaque`` and never changes. A ``kubernetes.io/service-account-token``
Secret must name its ServiceAccount in the ``kubernetes.io/service-account.name`` annotation and
gets ``data.token`` and ``data.namespace`` filled in, as the token controller would shortly after
the write (here at once, so a client never sees it empty). The token is a long-lived one that
TokenReview accepts while this Secret holds it (``epp_sim.apiserver.tokens``).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from epp_sim.apiserver.kinds import Obj
from epp_sim.apiserver.tokens import SA_NAME_ANNOTATION, legacy_token

__all__ = ["SERVICE_ACCOUNT_TOKEN", "prepare_secret"]

SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"
Cause = tuple[str, str, str]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def prepare_secret(new: Obj, old: Obj | None) -> list[Cause]:
    """Defaults, checks and the token of a Secret about to be written: (new, old) → invalid causes."""
    data: dict[str, Any] = dict(new.get("data") or {})
    for key, value in (new.pop("stringData", None) or {}).items():
        data[key] = _b64(str(value))
    if data:
        new["data"] = data
    causes: list[Cause] = []
    for key, value in data.items():
        try:
            base64.b64decode(str(value), validate=True)
        except binascii.Error:
            causes.append((f"data[{key}]", "FieldValueInvalid", "Invalid value: illegal base64 data"))
    kind = new.setdefault("type", "Opaque")
    if old is not None and old.get("type", "Opaque") != kind:
        causes.append(("type", "FieldValueInvalid", f'Invalid value: "{kind}": field is immutable'))
    if kind != SERVICE_ACCOUNT_TOKEN or causes:
        return causes
    meta = new["metadata"]
    account = (meta.get("annotations") or {}).get(SA_NAME_ANNOTATION)
    if not account:
        return [(f"metadata.annotations[{SA_NAME_ANNOTATION}]", "FieldValueRequired", "Required value")]
    data = new.setdefault("data", data)
    kept = ((old or {}).get("data") or {}).get("token")
    data.setdefault("token", kept or _b64(legacy_token(meta["namespace"], meta["name"], account)))
    data.setdefault("namespace", _b64(meta["namespace"]))
    return []
