"""epp-sim: what the epp picker is tested and demonstrated with, shipped apart from the picker.

- ``apiserver``, ``modelserver``, ``workloads``: stand-ins for what cannot run here (a Kubernetes
  API server, vLLM pods, the Deployment controller). They import only ``epp.labels`` and
  ``epp.clock`` from epp, so a picker bug cannot hide behind a constant shared with its simulator.
- ``dev``, ``bench``: ``epp dev`` and ``epp bench``, composition roots that run the real picker.
- ``pytest_plugin``: fixtures that let any CI test its own pool and config against all of it.

Importing this package starts nothing.
"""

__version__ = "0.1.0"
