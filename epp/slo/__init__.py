"""SLO-aware routing's latency predictor: features, the embedded model (trained off the loop) and upstream's sidecars.

A library for ``predicted-latency-producer``: it imports only the framework (and numpy, LightGBM,
httpx), never telemetry; its series are declared in ``series.py``, which only the runtime imports.
"""
