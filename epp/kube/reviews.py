"""The metrics authorizer's reviewer: ``TokenReview`` and ``SubjectAccessReview`` through the process's kr8s ``Api``.

:class:`~epp.telemetry.metrics_auth.MetricsAuth` decides (caches, retries, upstream's answers);
this only creates the review objects, mapping our Kubernetes errors onto the authorizer's: a
passing failure (API server 5xx, 429, unreachable) is worth another try, any other is final.
"""

from __future__ import annotations

from epp.kube.client import Api, JsonObject, KubeError, KubeUnavailableError, call_json
from epp.telemetry.metrics_auth import ReviewError, ReviewUnavailableError

__all__ = ["KubeReviewer"]


class KubeReviewer:
    """Creates review objects with ``api`` (the authorizer's :class:`~epp.telemetry.metrics_auth.Reviewer`)."""

    def __init__(self, api: Api) -> None:
        self._api = api

    async def create(self, group_version: str, plural: str, body: JsonObject) -> JsonObject:
        try:
            return await call_json(self._api, "POST", group_version=group_version, path=plural, body=body)
        except KubeUnavailableError as e:
            raise ReviewUnavailableError(str(e)) from e
        except KubeError as e:
            raise ReviewError(str(e)) from e
