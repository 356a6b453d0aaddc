"""Stand-ins for what cannot run here: a fake Kubernetes API server, model servers, workloads.

Importing this package starts nothing. ``epp.sim`` imports only ``epp.labels`` and ``epp.clock``
from epp, so a picker bug cannot hide behind a constant shared with its simulator.
"""
