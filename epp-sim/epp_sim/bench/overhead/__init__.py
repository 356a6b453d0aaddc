"""``epp bench overhead``: what the picker costs per request, against Envoy alone and a no-op processor.

Everything runs on loopback as separate processes, started and stopped by PID (``stack``): a
fast backend as the N "pods", a fake API server, a no-op ext_proc server, ``epp serve``, and
three Envoys, one per variant (a) ``envoy`` alone, (b) ``noop`` with the ext_proc filter to the
no-op processor, (c) ``epp`` with the filter to the picker.

For each prompt size and concurrency, interleaved rounds (``rounds``) of (a, b, c, a, b, c, …)
run a closed-loop load (``wrk`` if installed, else ``epp_sim.bench.loadgen``), so machine noise
hits every variant alike: requests/s, p50/p90/p99, CPU of every process and CPU µs per request;
per cell the ratios c/b and c/a and the p50 the picker adds. Then ext_proc streams/s straight to
each processor, the picker's own per-phase histogram (``phases``), the scraper's CPU alone at
several endpoint counts (``epp_sim.bench.scrape_cost``), optionally a py-spy profile and a soak
(``steady_load``); ``targets`` judges the result and ``run`` puts it all in one JSON document.
"""

from epp_sim.bench.overhead.options import OverheadOptions, prompt_body
from epp_sim.bench.overhead.phases import phase_overhead
from epp_sim.bench.overhead.run import run_overhead
from epp_sim.bench.overhead.stack import Stack

__all__ = ["OverheadOptions", "Stack", "phase_overhead", "prompt_body", "run_overhead"]
