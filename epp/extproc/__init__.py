"""Envoy ext_proc boundary: the gRPC server, the per-stream state machine and its wire builders.

Nothing below this package sees protobuf or gRPC; it talks to the request path through the
protocols in :mod:`epp.extproc.processor` (``Pipelines``, ``RequestPipeline``).
"""
