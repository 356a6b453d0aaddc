"""The ``epp.v1`` API behind the same guard as ``/metrics``: bearer token, TokenReview, SubjectAccessReview.

A gRPC server interceptor asks the metrics port's :class:`~epp.telemetry.metrics_auth.MetricsAuth`
(one instance, one cache) about every ``epp.v1`` call, with the bearer token of the call's
``authorization`` metadata, the verb ``post`` (a gRPC call is an HTTP/2 POST) and the method's path
as the non-resource URL, e.g. ``/epp.v1.Explain/Explain``; RBAC grants it with
``nonResourceURLs: ["/epp.v1.*"], verbs: ["post"]``. A refusal ends the call with the status below
and upstream's text as details. Health and reflection on the same port stay open: kubelet's
probes carry no token.

========  =====================
HTTP 401  ``UNAUTHENTICATED``
HTTP 403  ``PERMISSION_DENIED``
HTTP 500  ``INTERNAL``
========  =====================
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from epp.telemetry.metrics_auth import MetricsAuth

__all__ = ["ApiAuthInterceptor"]

_CODES = {401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED}


class ApiAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    """Checks calls to the services under ``prefix`` (``/epp.v1.``); every other call passes."""

    def __init__(self, auth: MetricsAuth, prefix: str) -> None:
        self._auth = auth
        self._prefix = prefix

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: grpc.HandlerCallDetails
    ) -> Any:
        method: str = details.method or ""
        if not method.startswith(self._prefix):
            return await continuation(details)
        authorization = ""
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                authorization = value if isinstance(value, str) else value.decode("latin-1")
                break
        refusal = await self._auth.check("POST", method, authorization)
        if refusal is None:
            return await continuation(details)
        code = _CODES.get(refusal.status, grpc.StatusCode.INTERNAL)

        async def refuse(_request: Any, context: grpc.aio.ServicerContext) -> None:
            await context.abort(code, refusal.text)

        return grpc.unary_unary_rpc_method_handler(refuse)
