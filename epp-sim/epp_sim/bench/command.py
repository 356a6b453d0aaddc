"""``epp bench overhead|routing|scale``: flags → options → run → tables on stdout, JSON and PNG in ``--out``.

Parsing and printing only; the benchmarks live in the ``overhead`` and ``routing`` packages. ``--quick``
is the CI smoke shape of each (seconds, not minutes; the numbers mean nothing). ``scale`` writes JSON
and tables only (no plot).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["add_parser", "print_overhead", "print_routing", "print_scale"]

_T = TypeVar("_T")


def _csv(convert: Callable[[str], _T], what: str) -> Callable[[str], tuple[_T, ...]]:
    """An argparse type: a comma-separated list of at least one value of ``convert``."""

    def parse(text: str) -> tuple[_T, ...]:
        try:
            values = tuple(convert(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError("expected at least one value")
        return values

    return parse


_ints = _csv(int, "integers")
_floats = _csv(float, "numbers")


def _strs(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``bench`` with its ``overhead`` and ``routing`` sub-commands."""
    bench: argparse.ArgumentParser = subparsers.add_parser(
        "bench", help="benchmarks: the picker's per-request overhead and routing quality"
    )
    sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCH")

    o = sub.add_parser(
        "overhead",
        help="Envoy alone vs + no-op ext_proc vs + epp serve, interleaved rounds",
        description="Requests/s, latency and CPU of Envoy alone, Envoy + a no-op ext_proc server and "
        "Envoy + epp serve, on loopback; plus ext_proc streams/s without Envoy, the picker's per-phase "
        "overhead and the scraper's CPU.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    o.add_argument("--quick", action="store_true", help="CI smoke test: seconds, meaningless numbers")
    o.add_argument("--endpoints", type=int, default=None, help="pods behind the picker (default 8)")
    o.add_argument("--concurrency", type=_ints, default=None, help="closed-loop concurrencies (default 1,4,16,64)")
    o.add_argument("--prompt-bytes", type=_ints, default=None, help="prompt sizes (default 1024,225280)")
    o.add_argument("--rounds", type=int, default=None, help="interleaved rounds per cell (default 3)")
    o.add_argument("--round-seconds", type=float, default=None, help="seconds per round (default 2)")
    o.add_argument("--scrape-endpoints", type=_ints, default=None, help="scraper-cost endpoint counts (8,64)")
    o.add_argument(
        "--loadgen",
        choices=("auto", "native", "python"),
        default="auto",
        help="auto: wrk/h2load when installed, else the Python generator",
    )
    o.add_argument("--profile", type=float, default=0.0, metavar="SECONDS", help="py-spy the picker this long")
    o.add_argument(
        "--soak",
        type=float,
        default=None,
        metavar="SECONDS",
        help="then a memory soak: RSS per request of picker and no-op behind stock and graceful Envoys "
        "(default 0: none; --quick: 10)",
    )
    o.add_argument("--out", type=Path, default=Path("bench-results"), help="directory for JSON and PNG")
    o.set_defaults(func=_run_overhead)

    r = sub.add_parser(
        "routing",
        help="routing strategies on a simulated cluster, same seeded arrivals",
        description="Round robin, random, least queue, the v0.3 filter tree, the default profile and a "
        "prefix-aware profile on simulated vLLM servers under seeded Poisson workloads.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    r.add_argument("--quick", action="store_true", help="CI smoke test: seconds, meaningless numbers")
    r.add_argument("--servers", type=int, default=None, help="simulated model servers (default 8)")
    r.add_argument("--strategies", type=_strs, default=None, help="subset of strategies, comma-separated")
    r.add_argument("--workloads", type=_strs, default=None, help="subset of workloads, comma-separated")
    r.add_argument(
        "--replicas",
        type=_ints,
        default=None,
        help="picker replicas per strategy (default: 1,2 on cache-pressure, else 1)",
    )
    r.add_argument("--loads", type=_floats, default=None, help="offered load as fractions of capacity")
    r.add_argument("--sim-seconds", type=float, default=None, help="simulated seconds of arrivals per run")
    r.add_argument("--time-scale", type=float, default=None, help="simulator clock speed-up")
    r.add_argument("--seed", type=int, default=None, help="workload seed")
    r.add_argument("--out", type=Path, default=Path("bench-results"), help="directory for JSON and PNG")
    r.set_defaults(func=_run_routing)

    sc = sub.add_parser(
        "scale",
        help="the picker over hundreds of pods: idle CPU, fetch rate, added latency; CPU per long prompt",
        description="One picker over pools of 100-500 pods (the fast backend's vLLM pages, 50 ms scrapes): "
        "its idle CPU, each pod's fetch rate and metric age, the p50 the pods add at c=1; then its CPU per "
        "request for long prompts through Envoy with the default and the precise configuration.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sc.add_argument("--quick", action="store_true", help="CI smoke test: seconds, meaningless numbers")
    sc.add_argument("--pods", type=_ints, default=None, help="pool sizes (default 100,250,400,500)")
    sc.add_argument("--idle-seconds", type=float, default=None, help="idle measurement per pool size (default 6)")
    sc.add_argument("--latency-rounds", type=int, default=None, help="c=1 rounds with and without the pods (3)")
    sc.add_argument("--round-seconds", type=float, default=None, help="seconds per load round (default 3)")
    sc.add_argument("--prompt-kib", type=_ints, default=None, help="prompt sizes in KiB (default 4,100,400)")
    sc.add_argument("--configs", type=_strs, default=None, help="default and/or precise (default both)")
    sc.add_argument(
        "--scrape-modes",
        type=_strs,
        default=None,
        help="in-loop and/or process (--metrics-scrape-process); default both",
    )
    sc.add_argument("--concurrency", type=int, default=None, help="concurrency of the CPU-per-request rounds (4)")
    sc.add_argument("--cpu-rounds", type=int, default=None, help="interleaved rounds per prompt size (default 2)")
    sc.add_argument(
        "--tokenizer", type=Path, default=None, help="a directory with tokenizer.json for the precise picker"
    )
    sc.add_argument(
        "--workers", type=_ints, default=None, help="epp serve --workers counts for the precise picker (default 1,2)"
    )
    sc.add_argument("--worker-prompt-kib", type=_ints, default=None, help="prompt sizes of the workers part (100,400)")
    sc.add_argument("--worker-concurrency", type=int, default=None, help="concurrency of the workers part (8)")
    sc.add_argument(
        "--loadgen",
        choices=("auto", "native", "python"),
        default="auto",
        help="auto: wrk when installed, else the Python generator",
    )
    sc.add_argument("--out", type=Path, default=Path("bench-results"), help="directory for the JSON")
    sc.set_defaults(func=_run_scale)
    return bench


def _fmt(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}f}"


def _fmt_or_dash(value: float | None) -> str:
    return "-" if value is None else _fmt(value)


def print_overhead(doc: dict[str, Any]) -> None:
    """The overhead document as tables."""
    from epp_sim.bench.report import format_table, machine_line

    print(f"\nmachine: {machine_line(doc['machine'])}")
    opts = doc["options"]
    print(f"load generator: HTTP {opts['http_loadgen']}, gRPC {opts['grpc_loadgen']}; Envoy: {opts['envoy_body_mode']}")
    rows = []
    for c in doc["http"]:
        cores = c["cpu_cores"]
        rows.append(
            [
                f"{c['prompt_bytes'] // 1024} KB",
                c["concurrency"],
                c["variant"],
                _fmt(c["rps"], 0),
                _fmt(c["p50_ms"], 2),
                _fmt(c["p90_ms"], 2),
                _fmt(c["p99_ms"], 2),
                _fmt(cores.get("envoy", 0), 2),
                _fmt(cores.get("processor", 0), 2),
                _fmt(cores.get("backend", 0), 2),
                _fmt(cores.get("loadgen", 0), 2),
                c["errors"],
                _fmt(c["rps_vs_noop"], 2) if c["variant"] == "epp" else "",
                _fmt(c["rps_vs_envoy"], 3) if c["variant"] == "epp" else "",
                _fmt(c["added_p50_vs_noop_ms"], 2) if c["variant"] == "epp" else "",
            ]
        )
    headers = ["prompt", "conc", "variant", "req/s", "p50 ms", "p90 ms", "p99 ms", "envoy cpu", "proc cpu"]
    headers += ["backend cpu", "loadgen cpu", "errors", "c/b", "c/a", "+p50 vs b"]
    print("\nThrough Envoy (cpu in cores):")
    print(format_table(headers, rows))
    print("\nPicker per-phase overhead (epp_picker_overhead_seconds, µs):")
    rows = [
        [f"{p['prompt_bytes'] // 1024} KB", p["concurrency"], phase, _fmt(v["mean_us"]), _fmt(v["p50_us"])]
        + [_fmt(v["p90_us"]), _fmt(v["p99_us"])]
        for p in doc["picker_phases"]
        for phase, v in p["phases"].items()
    ]
    print(format_table(["prompt", "conc", "phase", "mean", "p50", "p90", "p99"], rows))
    print("\next_proc straight to the processor (no Envoy):")
    rows = [
        [f"{g['prompt_bytes'] // 1024} KB", g["concurrency"], g["variant"], _fmt(g["streams_per_s"], 0)]
        + [_fmt(g["p50_ms"], 2), _fmt(g["p99_ms"], 2), _fmt(g["cpu_us_per_request"].get("processor", 0), 0)]
        for g in doc["grpc_direct"]
    ]
    print(format_table(["prompt", "conc", "processor", "streams/s", "p50 ms", "p99 ms", "cpu µs/stream"], rows))
    print("\nScraper alone (vLLM /metrics, ~45 KB, every 50 ms):")
    rows = [
        [s["endpoints"], _fmt(s["cpu_per_s"], 3), _fmt(s["scrapes_per_s"], 0), _fmt(s["cpu_per_scrape_us"], 0)]
        + [s["errors"]]
        for s in doc["scrape"]
    ]
    print(format_table(["endpoints", "cores", "scrapes/s", "cpu µs/scrape", "errors"], rows))
    if "profile" in doc:
        prof = doc["profile"]
        print(f"\npy-spy on epp serve ({prof['samples']} busy samples, {prof['rps_while_profiled']:.0f} req/s):")
        rows = [[_fmt(e["share"] * 100), e["function"]] for e in prof["top_self"]]
        print(format_table(["self %", "function"], rows))
        rows = [[_fmt(e["share"] * 100), e["function"]] for e in prof["top_inclusive"]]
        print(format_table(["incl %", "function"], rows))
    if "soak" in doc:
        soak = doc["soak"]
        print(f"\nmemory soak ({soak['seconds']:.0f} s, pairs in turn, c={soak['concurrency']}, 1 KB):")
        rows = [
            [
                name,
                str(p["requests"]),
                _fmt_or_dash(p["rss_first_mib"]),
                _fmt_or_dash(p["rss_last_mib"]),
                _fmt_or_dash(p["rss_slope_bytes_per_request"]),
            ]
            for name, p in soak["pairs"].items()
        ]
        print(format_table(["processor/envoy", "requests", "rss first MiB", "rss last MiB", "bytes/request"], rows))
    print("\ntargets:")
    for name, t in doc["targets"].items():
        verdict = "not measured" if t["met"] is None else ("met" if t["met"] else "MISSED")
        print(f"  {name}: {t['value']} {verdict}")


def print_routing(doc: dict[str, Any]) -> None:
    """The routing document as one table per workload."""
    from epp_sim.bench.report import format_table, machine_line

    print(f"\nmachine: {machine_line(doc['machine'])}")
    print(f"simulator: {doc['options']['servers']} servers, time_scale {doc['options']['time_scale']}")
    for workload in dict.fromkeys(r["workload"] for r in doc["runs"]):
        print(f"\nworkload {workload} (times in simulated seconds):")
        rows = []
        slo = doc["workloads"].get(workload, {}).get("slo") is not None
        for r in doc["runs"]:
            if r["workload"] != workload:
                continue
            t, e = r["ttft_s"], r["e2e_s"]
            row = [
                _fmt(r["load"], 2),
                _fmt(r["rate"], 1),
                r["strategy"] if r["replicas"] == 1 else f"{r['strategy']} ×{r['replicas']}",
                r["completed"],
                _fmt(t["p50"], 3),
                _fmt(t["p90"], 3),
                _fmt(t["p99"], 3),
                _fmt(e["p50"], 2),
                _fmt(e["p90"], 2),
                _fmt(r["itl_s"]["p90"] * 1e3, 1),
                _fmt(r["output_tokens_per_s"], 0),
                _fmt(r["prefix_hit_rate"] * 100, 1),
                _fmt(r["shed_rate"] * 100, 1),
                r["errors"],
                _fmt(r["time_stretch"], 2),
            ]
            rows.append([*row, _fmt(r["slo_goodput_rps"], 1)] if slo else row)
        headers = ["load", "req/s", "strategy", "done", "ttft p50", "ttft p90", "ttft p99", "e2e p50", "e2e p90"]
        headers += ["itl p90 ms", "out tok/s", "hit %", "shed %", "errors", "stretch"] + (["slo req/s"] if slo else [])
        print(format_table(headers, rows))
    print("\ntargets:")
    for name, t in doc["targets"].items():
        verdict = "not measured" if t["met"] is None else ("met" if t["met"] else "MISSED")
        print(f"  {name}: {t['detail']} {verdict}")


def print_scale(doc: dict[str, Any]) -> None:
    """The scale document as tables."""
    from epp_sim.bench.report import format_table, machine_line

    print(f"\nmachine: {machine_line(doc['machine'])}")
    start, end = doc["load_average"]["start"], doc["load_average"]["end"]
    print(f"load average (1/5/15 min) at start {start[0]:.2f}/{start[1]:.2f}/{start[2]:.2f}, at end {end[0]:.2f}")
    print(f"load generator: {doc['options']['http_loadgen']}; precise tokenizer: {doc['options'].get('tokenizer')}")
    print("\nIdle picker (no requests), scraping every pod every 50 ms (cores: with its worker; ages in ms):")
    rows = [
        [
            i["mode"],
            i["pods"],
            _fmt(i["cpu_cores"], 3),
            _fmt(i["serving_process_cores"], 3),
            _fmt(i["fetches_per_pod_per_s"], 1),
            _fmt(i["cpu_per_fetch_us"], 0),
            _fmt_or_dash(i["achieved_interval_ms"]),
            _fmt_or_dash(i["metrics_age_p50_ms"]),
            _fmt_or_dash(i["metrics_age_max_ms"]),
            i["errors"],
            _fmt(i["rss_mib"], 0),
        ]
        for i in doc["idle"]
    ]
    headers = ["mode", "pods", "cores", "serving", "fetch/pod/s", "cpu µs/fetch", "interval ms", "age p50", "age max"]
    print(format_table([*headers, "errors", "RSS MiB"], rows))
    print("\nc=1, 1 KiB through Envoy, with the pods and with the base pods only (interleaved):")
    rows = [
        [
            lat["mode"],
            lat["pods"],
            _fmt(lat["without"]["p50_ms"], 2),
            _fmt(lat["with"]["p50_ms"], 2),
            _fmt(lat["added_p50_ms"], 2),
            _fmt(lat["without"]["p99_ms"], 2),
            _fmt(lat["with"]["p99_ms"], 2),
            _fmt(lat["with"]["picker_cores"], 2),
        ]
        for lat in doc["latency"]
    ]
    headers = ["mode", "pods", "p50 without", "p50 with", "added p50", "p99 without", "p99 with", "cores"]
    print(format_table(headers, rows))
    print("\nPicker CPU per request (unique prompts, through Envoy):")
    rows = [
        [
            f"{c['prompt_kib']} KiB",
            f"{c['config']} ({c['picker']})",
            c["concurrency"],
            _fmt(c["rps"], 0),
            _fmt(c["p50_ms"], 2),
            _fmt(c["p99_ms"], 2),
            _fmt(c["picker_cores"], 2),
            _fmt_or_dash(c["picker_cpu_ms_per_request"]),
            c["errors"],
            _fmt(c["rss_mib"], 0),
        ]
        for c in doc["cpu_per_request"]
    ]
    headers = ["prompt", "config", "conc", "req/s", "p50 ms", "p99 ms", "cores", "cpu ms/req", "errors", "RSS MiB"]
    print(format_table(headers, rows))
    if doc.get("workers"):
        print("\nThe precise picker with --workers N (unique prompts, through Envoy; cores: all its processes):")
        rows = [
            [
                f"{c['prompt_kib']} KiB",
                c["workers"],
                c["concurrency"],
                _fmt(c["rps"], 1),
                _fmt_or_dash(c["throughput_vs_one_worker"]),
                _fmt(c["p50_ms"], 1),
                _fmt(c["p99_ms"], 1),
                _fmt(c["picker_cores"], 2),
                _fmt_or_dash(c["picker_cpu_ms_per_request"]),
                c["errors"],
                _fmt(c["rss_mib"], 0),
            ]
            for c in doc["workers"]
        ]
        headers = ["prompt", "workers", "conc", "req/s", "× one", "p50 ms", "p99 ms", "cores", "cpu ms/req", "errors"]
        print(format_table([*headers, "RSS MiB"], rows))
    print("\ntargets:")
    for name, t in doc["targets"].items():
        verdict = "not measured" if t["met"] is None else ("met" if t["met"] else "MISSED")
        print(f"  {name}: {t['value']} {verdict}")


def _install_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()


def _given(values: dict[str, Any]) -> dict[str, Any]:
    """The flags the user set (argparse leaves the rest None, so the options keep their defaults)."""
    return {k: v for k, v in values.items() if v is not None}


def _run(
    name: str,
    args: argparse.Namespace,
    build: Callable[[], Any],
    run: Callable[[Any], Coroutine[Any, Any, dict[str, Any]]],
    show: Callable[[dict[str, Any]], None],
) -> int:
    """Validate the options, run the benchmark, print it, write JSON and the plot."""
    from epp_sim.bench.report import plot_overhead, plot_routing, write_json

    try:
        options = build()
    except ValueError as e:
        print(f"epp bench {name}: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING)
    _install_uvloop()
    doc = asyncio.run(run(options))
    show(doc)
    out: Path = args.out
    path = write_json(out / f"{name}.json", doc)
    plotter = {"overhead": plot_overhead, "routing": plot_routing}.get(name)
    if plotter is None:
        print(f"\nwrote {path}")
        return 0
    plot = plotter(doc, out / f"{name}.png")
    print(f"\nwrote {path}" + (f" and {plot}" if plot else " (matplotlib not installed: no plot)"))
    return 0


def _run_overhead(args: argparse.Namespace) -> int:
    from epp_sim.bench.overhead import OverheadOptions, run_overhead

    overrides = _given(
        {
            "endpoints": args.endpoints,
            "concurrencies": args.concurrency,
            "prompt_bytes": args.prompt_bytes,
            "rounds": args.rounds,
            "round_seconds": args.round_seconds,
            "scrape_endpoints": args.scrape_endpoints,
            "soak_seconds": args.soak,
        }
    )
    overrides.update(loadgen=args.loadgen, profile_seconds=args.profile)
    options = OverheadOptions.quick if args.quick else OverheadOptions
    return _run("overhead", args, lambda: options(**overrides), run_overhead, print_overhead)


def _run_routing(args: argparse.Namespace) -> int:
    from epp_sim.bench.routing import RoutingOptions, run_routing

    overrides = _given(
        {
            "servers": args.servers,
            "strategies": args.strategies,
            "workloads": args.workloads,
            "replicas": args.replicas,
            "loads": args.loads,
            "sim_seconds": args.sim_seconds,
            "time_scale": args.time_scale,
            "seed": args.seed,
        }
    )
    options = RoutingOptions.quick if args.quick else RoutingOptions
    return _run("routing", args, lambda: options(**overrides), run_routing, print_routing)


def _run_scale(args: argparse.Namespace) -> int:
    from epp_sim.bench.scale import ScaleOptions, run_scale

    overrides = _given(
        {
            "pods": args.pods,
            "idle_seconds": args.idle_seconds,
            "latency_rounds": args.latency_rounds,
            "round_seconds": args.round_seconds,
            "prompt_kib": args.prompt_kib,
            "configs": args.configs,
            "scrape_modes": args.scrape_modes,
            "concurrency": args.concurrency,
            "cpu_rounds": args.cpu_rounds,
            "tokenizer": args.tokenizer,
            "workers": args.workers,
            "worker_prompt_kib": args.worker_prompt_kib,
            "worker_concurrency": args.worker_concurrency,
        }
    )
    overrides.update(loadgen=args.loadgen)
    options = ScaleOptions.quick if args.quick else ScaleOptions
    return _run("scale", args, lambda: options(**overrides), run_scale, print_scale)
