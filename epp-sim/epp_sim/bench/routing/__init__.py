"""``epp bench routing``: how much better requests fare when the picker chooses, on a simulated cluster.

For each workload, offered load and strategy (``strategies``): a fresh simulated cluster
(``cluster``: N vLLM simulators in a child process, restarted so every strategy starts with cold
caches), then the picker in this process as ``epp serve`` builds it. Every arrival of the seeded
workload is released at its (scaled) time, routed and sent straight to the chosen simulator as
a streaming chat completion (``replay``), so the client sees TTFT, end-to-end latency and usage.
``scoring`` turns what the client and the simulators saw into the run's record and the
targets; ``run`` puts every run in one JSON document.

Times are simulated seconds: wall-clock × ``time_scale``. The simulators' own numbers are used
where they are the truth (prefix-cache hits and queries); ``time_stretch`` says whether the
simulated timeline stayed honest (≈1.0) or the simulators fell behind for lack of CPU (> 1).
"""

from epp_sim.bench.routing.cluster import bench_sim_config
from epp_sim.bench.routing.options import RoutingOptions
from epp_sim.bench.routing.run import run_routing
from epp_sim.bench.routing.strategies import STRATEGIES

__all__ = ["STRATEGIES", "RoutingOptions", "bench_sim_config", "run_routing"]
