"""The families a vLLM API server exposes that are not vLLM's own: the Python process's, and HTTP's.

A real server's ``/metrics`` opens with ``prometheus_client``'s default collectors
(``python_gc_*``, ``python_info``, ``process_*``) and ends with
``prometheus_fastapi_instrumentator``'s ``http_*`` families. The picker reads none of them, but
they are most of the page, so a scrape here parses as much text as against a real server.
"""

from __future__ import annotations

import gc
import platform
import resource

from .exposition import (
    CounterFamily,
    HistogramFamily,
    SummaryFamily,
    family_header,
    gauge,
    labels_text,
    value_text,
)

__all__ = ["HttpMetrics", "ProcessMetrics"]

HTTP_HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5,
    3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0,
)  # fmt: skip
HTTP_LOWR_BUCKETS = (0.1, 0.5, 1.0)


class ProcessMetrics:
    """The default registry's ``python_*`` and ``process_*`` families, from this process."""

    def __init__(self, start_wall: float) -> None:
        major, minor, patch = platform.python_version_tuple()
        info = labels_text(
            {
                "implementation": platform.python_implementation(),
                "major": major,
                "minor": minor,
                "patchlevel": patch,
                "version": platform.python_version(),
            }
        )
        self._info = f"{family_header('python_info', 'Python platform information', 'gauge')}python_info{info} 1.0\n"
        self._start = value_text(start_wall)
        self._max_fds = value_text(resource.getrlimit(resource.RLIMIT_NOFILE)[0])

    def render(self, out: list[str]) -> None:
        stats = gc.get_stats()
        for fam, key, help_text in (
            ("collected", "collected", "Objects collected during gc"),
            ("uncollectable", "uncollectable", "Uncollectable objects found during GC"),
            ("collections", "collections", "Number of times this generation was collected"),
        ):
            name = f"python_gc_objects_{fam}_total" if fam != "collections" else "python_gc_collections_total"
            out.append(family_header(name, help_text, "counter"))
            out.extend(f'{name}{{generation="{g}"}} {value_text(s[key])}\n' for g, s in enumerate(stats))
        out.append(self._info)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        rss = usage.ru_maxrss * 1024
        gauge(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.", "", rss * 4)
        gauge(out, "process_resident_memory_bytes", "Resident memory size in bytes.", "", rss)
        out.append(
            "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
            f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {self._start}\n"
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
            "# TYPE process_cpu_seconds_total counter\n"
            f"process_cpu_seconds_total {value_text(usage.ru_utime + usage.ru_stime)}\n"
            "# HELP process_open_fds Number of open file descriptors.\n"
            f"# TYPE process_open_fds gauge\nprocess_open_fds {value_text(64)}\n"
            "# HELP process_max_fds Maximum number of open file descriptors.\n"
            f"# TYPE process_max_fds gauge\nprocess_max_fds {self._max_fds}\n"
        )


class HttpMetrics:
    """``prometheus_fastapi_instrumentator``'s default families, which vLLM's API server exposes."""

    def __init__(self) -> None:
        self._requests = CounterFamily("http_requests", "Total number of requests by method, status and handler.")
        self._req_size = SummaryFamily("http_request_size_bytes", "Content length of incoming requests by handler.")
        self._resp_size = SummaryFamily("http_response_size_bytes", "Content length of outgoing responses by handler.")
        self._highr = HistogramFamily(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
            HTTP_HIGHR_BUCKETS,
        )
        self._lowr = HistogramFamily(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
            HTTP_LOWR_BUCKETS,
        )

    def observe(
        self, *, handler: str, method: str, status: int, duration: float, req_size: int, resp_size: int, now_wall: float
    ) -> None:
        """Record one finished HTTP request (status grouped as ``2xx``, like the instrumentator)."""
        key = self._requests.series({"handler": handler, "method": method, "status": f"{status // 100}xx"}, now_wall)
        self._requests.inc(key)
        self._req_size.observe({"handler": handler}, req_size, now_wall)
        self._resp_size.observe({"handler": handler}, resp_size, now_wall)
        self._highr.series({}, now_wall).observe(duration)
        self._lowr.series({"handler": handler, "method": method}, now_wall).observe(duration)

    def render(self, out: list[str]) -> None:
        self._requests.render(out)
        self._req_size.render(out)
        self._resp_size.render(out)
        self._highr.render(out)
        self._lowr.render(out)
