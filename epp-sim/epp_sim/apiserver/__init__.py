"""An envtest-style fake Kubernetes API server (``epp sim apiserver``).

Public surface: ``ApiServer`` (HTTP server + test hooks), ``Store`` (objects and the in-process
API controllers use), ``DataDir`` (a store kept across restarts), ``running_apiserver`` /
``apiserver_fixture`` (tests), ``ApiError``, ``PersistenceError``.
"""

from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.fixture import RunningApiServer, apiserver_fixture, running_apiserver
from epp_sim.apiserver.persistence import DataDir, PersistenceError
from epp_sim.apiserver.server import ApiServer
from epp_sim.apiserver.store import Store
from epp_sim.apiserver.watch import Event, Watch

__all__ = [
    "ApiError",
    "ApiServer",
    "DataDir",
    "Event",
    "PersistenceError",
    "RunningApiServer",
    "Store",
    "Watch",
    "apiserver_fixture",
    "running_apiserver",
]
