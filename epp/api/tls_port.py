"""The ``epp.v1`` API on its own port, behind the metrics TLS, when ``--metrics-cert-dir`` is set.

The API is guarded as ``/metrics`` is. Without metrics TLS it shares the health port; but kubelet's
gRPC probes need that port plaintext, so once ``/metrics`` is HTTPS the API moves to
``--epp-api-port`` (9004): served with the metrics certificate (``<cert_dir>/tls.crt`` and
``tls.key``), with ``--metrics-client-ca-file`` only to clients whose certificate that CA signed,
and with the ``/metrics`` authorizer still asked about every call. Reflection is served there too,
so ``grpcurl -cacert ...`` works without proto files. As the metrics server, it reads the files
once, at start, and refuses a bad one with the metrics server's message naming the flag. gRPC
negotiates TLS 1.2 at least, as the metrics server requires.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import grpc

from epp.extproc import pb
from epp.extproc.server import SERVER_OPTIONS, ExtraServices, bind_port
from epp.framework.endpoint import join_host_port
from epp.telemetry.metrics_server import metrics_ssl_context

__all__ = ["ApiTlsPort", "api_credentials"]

log = logging.getLogger(__name__)


def api_credentials(cert_dir: str, client_ca_file: str = "") -> grpc.ServerCredentials:
    """The metrics certificate as gRPC server credentials, requiring client certificates if a CA is given.

    Reads files: call it off the event loop.
    """
    metrics_ssl_context(cert_dir, client_ca_file)  # the metrics port's checks, with its messages
    with open(os.path.join(cert_dir, "tls.crt"), "rb") as f:
        cert = f.read()
    with open(os.path.join(cert_dir, "tls.key"), "rb") as f:
        key = f.read()
    ca = None
    if client_ca_file:
        with open(client_ca_file, "rb") as f:
            ca = f.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


class ApiTlsPort:
    """A gRPC server for ``services`` (and reflection) over TLS; start once, stop once."""

    def __init__(self, services: ExtraServices) -> None:
        self._services = services
        self._server: Any = None

    async def start(self, host: str, port: int, *, cert_dir: str, client_ca_file: str) -> int:
        """Listen on ``host:port`` (0 picks a free port); returns the bound port."""
        if self._server is not None:
            raise RuntimeError("epp.v1 API port already started")
        credentials = await asyncio.to_thread(api_credentials, cert_dir, client_ca_file)
        server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=self._services.interceptors)
        names = self._services.register(server)
        pb.enable_server_reflection((*names, pb.REFLECTION_SERVICE), server)
        bound = bind_port(server, "epp.v1 API", join_host_port(host, port), credentials)
        await server.start()
        self._server = server
        log.info("epp.v1 API serving", extra={"port": bound, "tls": True, "client_certificates": bool(client_ca_file)})
        return bound

    async def stop(self, grace: float) -> None:
        """No new calls; open ones get up to ``grace`` seconds."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
