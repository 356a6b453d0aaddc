"""KV-cache events from the model servers: decoding, the precise block index, per-endpoint subscribers.

vLLM (and SGLang) publish what each pod really stores and evicts over ZMQ PUB + msgpack. This
package turns that stream into an index the ``precise-prefix-cache-producer`` plugin reads; it
imports only the framework, so plugins may use it.
"""
