"""The picker's own gRPC API, ``epp.v1``: Endpoints, Explain and Config, for grpcurl and ``epp explain``.

The service definitions are ``protos/epp/v1/*.proto``; their compiled modules are generated into
``epp.api.v1`` at build time (see ``setup.py``) and imported only through :mod:`epp.api.pb`.
"""
