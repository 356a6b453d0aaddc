"""An envtest-style fake Kubernetes API server (``epp sim apiserver``).

Public surface: ``ApiServer`` (HTTP server + test hooks), ``Store`` (objects and the in-process
API controllers use), ``running_apiserver`` / ``apiserver_fixture`` (tests), ``ApiError``.
"""

from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.fixture import RunningApiServer, apiserver_fixture, running_apiserver
from epp_sim.apiserver.server import ApiServer
from epp_sim.apiserver.store import Store
from epp_sim.apiserver.watch import Event, Watch

__all__ = [
    "ApiError",
    "ApiServer",
    "Event",
    "RunningApiServer",
    "Store",
    "Watch",
    "apiserver_fixture",
    "running_apiserver",
]
