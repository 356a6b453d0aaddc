"""Assembling a local stack: fake cluster, simulated pods, the real picker and, optionally, Envoy.

One assembly (:class:`~epp_sim.stack.local.LocalStack`) serves ``epp dev``, the benchmarks,
the hermetic tests and the pytest plugin; :class:`~epp_sim.stack.pool_spec.PoolSpec` says what
pool it holds.
"""
