"""``epp bench scale``: what hundreds of pods and long prompts cost the picker.

One picker over a pool that grows from the base pods to each of ``pods`` (100, 250, 400, 500
by default), fed by the fast backend's realistic vLLM pages, scraping at the default 50 ms:
its idle CPU, each pod's fetch rate, achieved interval and metric age, and the p50 the pods add to
a request at c=1 (against the same picker with the base pods, interleaved). Then the picker's CPU
per request for 4, 100 and 400 KiB prompts through a real Envoy with the default and the precise
configuration (``stack``, ``run``; the verdicts in ``targets``).
"""

from epp_sim.bench.scale.options import CONFIGS, ScaleOptions, scale_prompt_body
from epp_sim.bench.scale.run import run_scale

__all__ = ["CONFIGS", "ScaleOptions", "run_scale", "scale_prompt_body"]
