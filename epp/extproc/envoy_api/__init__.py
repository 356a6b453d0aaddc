"""Envoy's ext_proc v3 API, generated at build time (``setup.py build_protos``); never edited or committed.

The descriptors come from the ``xds-protos`` build requirement, their files renamed into this package
(``envoy/type/v3/percent.proto`` → ``envoy_type_v3_percent_pb2``); proto packages and message names are
Envoy's. Only :mod:`epp.extproc.pb` imports these modules.
"""
