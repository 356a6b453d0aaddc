"""``epp sidecar``: the decode pod's proxy of disaggregated (prefill/decode) serving.

It stands in front of the decode engine, as the llm-d routing sidecar does: the picker routes a
request to the decode pod and names a prefill pod in ``x-prefiller-host-port``; the sidecar sends
the prompt there for its KV cache first, then has the local engine decode with it. Options in
``options.py``, the servers in ``server.py``, one request's flow in ``handler.py``.
"""
