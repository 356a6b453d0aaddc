"""Closed-loop load generators written in Python, run as their own process: HTTP and raw ext_proc gRPC.

Used when ``wrk``/``h2load`` are not installed (and for the gRPC mode when ``h2load`` is
missing). ``concurrency`` workers each keep exactly one request in flight for ``duration``
seconds, so the offered load is what the system under test can take at that concurrency.

- **http**: a minimal HTTP/1.1 keep-alive client on asyncio streams (no framework, uvloop when
  available): one connection per worker, a pre-built request, responses read by
  ``Content-Length`` or chunked framing. Cheap per request, so it disturbs the measurement less.
  With ``--unique RUN`` each request's prompt ends differently (a run id and a counter), for
  pickers whose caches would otherwise serve a repeated prompt.
- **grpc**: one ``ExternalProcessor/Process`` stream per request, straight to a processor: the
  messages Envoy would send for a POST in the GIE mode (protocol config, request headers, the
  body as one chunk, response headers, a JSON response body), then half-close and read every
  answer. This is the picker's throughput with no Envoy in front.

Run as ``python -m epp_sim.bench.loadgen http|grpc ...``; it prints one JSON :class:`LoadResult`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LoadResult", "ext_proc_messages", "grpc_load", "http_load", "percentile", "unique_bodies"]

_RESPONSE_BODY = b'{"id":"cmpl-1","object":"text_completion","choices":[],"usage":{"prompt_tokens":1}}'


@dataclass(slots=True)
class LoadResult:
    """What one load run measured; latencies in seconds."""

    tool: str
    requests: int
    errors: int
    duration: float
    p50: float
    p90: float
    p99: float
    mean: float
    error_kinds: dict[str, int] = field(default_factory=dict)
    loadgen_cpu: float = 0.0
    """CPU seconds the load generator itself used (so its share of the 2 cores is visible)."""

    @property
    def rate(self) -> float:
        """Successful requests per second."""
        return self.requests / self.duration if self.duration > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LoadResult:
        return cls(**doc)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of already sorted values; 0.0 for no values."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), math.ceil(q / 100.0 * len(sorted_values))))
    return sorted_values[rank - 1]


def _result(tool: str, latencies: list[float], errors: dict[str, int], duration: float, cpu: float) -> LoadResult:
    latencies.sort()
    return LoadResult(
        tool=tool,
        requests=len(latencies),
        errors=sum(errors.values()),
        duration=duration,
        p50=percentile(latencies, 50),
        p90=percentile(latencies, 90),
        p99=percentile(latencies, 99),
        mean=sum(latencies) / len(latencies) if latencies else 0.0,
        error_kinds=dict(errors),
        loadgen_cpu=cpu,
    )


# ---------------------------------------------------------------------------------------- HTTP


def http_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The bytes of one HTTP/1.1 POST, built once and sent for every request."""
    lines = [f"POST {path} HTTP/1.1", f"host: {host}:{port}", f"content-length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    """Read one response (head and body); return its status code."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                return status
    start = lower.find(b"content-length:")
    if start >= 0:
        stop = lower.find(b"\r\n", start)
        await reader.readexactly(int(lower[start + 15 : stop]))
    return status


def unique_bodies(body: bytes, run: str) -> Iterator[bytes]:
    """``body`` with `` #<run>-<n>`` before its last two bytes (the JSON prompt's closing ``"}``): each prompt ends
    differently, so no cache of the picker's (tokens, prefixes) serves a request whole."""
    head, tail = body[:-2], body[-2:]
    for n in itertools.count(1):
        yield b"%s #%s-%d%s" % (head, run.encode(), n, tail)


async def _http_worker(
    host: str,
    port: int,
    requests: Callable[[], bytes],
    deadline: float,
    latencies: list[float],
    errors: dict[str, int],
) -> None:
    writer: asyncio.StreamWriter | None = None
    try:
        while time.perf_counter() < deadline:
            if writer is None:
                try:
                    reader, writer = await asyncio.open_connection(host, port)
                except OSError:
                    errors["connect"] = errors.get("connect", 0) + 1
                    await asyncio.sleep(0.01)
                    continue
            request = requests()
            started = time.perf_counter()
            try:
                writer.write(request)
                status = await _read_response(reader)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                errors["read"] = errors.get("read", 0) + 1
                writer.close()
                writer = None
                continue
            if status == 200:
                latencies.append(time.perf_counter() - started)
            else:
                errors[f"status_{status}"] = errors.get(f"status_{status}", 0) + 1
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def http_load(
    host: str,
    port: int,
    *,
    path: str,
    body: bytes,
    concurrency: int,
    duration: float,
    headers: dict[str, str],
    unique: str = "",
) -> LoadResult:
    """``concurrency`` keep-alive connections, one request in flight each, for ``duration`` seconds.

    ``unique``: a run id; every request's prompt then ends differently (:func:`unique_bodies`).
    """
    if unique:
        bodies = unique_bodies(body, unique)

        def requests() -> bytes:
            return http_request(host, port, path, next(bodies), headers)
    else:
        request = http_request(host, port, path, body, headers)

        def requests() -> bytes:
            return request

    latencies: list[float] = []
    errors: dict[str, int] = {}
    cpu0, started = time.process_time(), time.perf_counter()
    deadline = started + duration
    async with asyncio.TaskGroup() as tg:
        for i in range(concurrency):
            tg.create_task(_http_worker(host, port, requests, deadline, latencies, errors), name=f"http-load-{i}")
    return _result("python-http", latencies, errors, time.perf_counter() - started, time.process_time() - cpu0)


# ---------------------------------------------------------------------------------------- gRPC


def ext_proc_messages(body: bytes, *, path: str = "/v1/completions", host: str = "bench") -> list[Any]:
    """The ProcessingRequests Envoy sends for one POST in the GIE mode (full-duplex bodies)."""
    from epp.extproc import pb

    def headers(pairs: list[tuple[str, str]], *, eos: bool) -> Any:
        return pb.HttpHeaders(
            headers=pb.HeaderMap(headers=[pb.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs]),
            end_of_stream=eos,
        )

    mode = pb.ProcessingMode
    config = pb.ProtocolConfiguration(
        request_body_mode=mode.FULL_DUPLEX_STREAMED, response_body_mode=mode.FULL_DUPLEX_STREAMED
    )
    request_headers = [
        (":method", "POST"),
        (":path", path),
        (":authority", host),
        (":scheme", "http"),
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        ("x-request-id", "bench"),
    ]
    response_headers = [(":status", "200"), ("content-type", "application/json")]
    return [
        pb.ProcessingRequest(request_headers=headers(request_headers, eos=False), protocol_config=config),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True)),
        pb.ProcessingRequest(response_headers=headers(response_headers, eos=False)),
        pb.ProcessingRequest(response_body=pb.HttpBody(body=_RESPONSE_BODY, end_of_stream=True)),
    ]


def grpc_frames(messages: Sequence[Any]) -> bytes:
    """The messages as one gRPC request body (5-byte length prefix each), for ``h2load -d``."""
    out = bytearray()
    for message in messages:
        data = message.SerializeToString()
        out += b"\x00" + len(data).to_bytes(4, "big") + data
    return bytes(out)


async def grpc_load(target: str, *, body: bytes, concurrency: int, duration: float) -> LoadResult:
    """``concurrency`` concurrent ext_proc streams on one channel, for ``duration`` seconds."""
    import grpc

    from epp.extproc import pb

    messages = ext_proc_messages(body)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    cpu0, started = time.process_time(), time.perf_counter()
    deadline = started + duration
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb.ExternalProcessorStub(channel)

        async def worker() -> None:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    answers = [r async for r in stub.Process(iter(messages))]
                except grpc.aio.AioRpcError as e:
                    errors[e.code().name] = errors.get(e.code().name, 0) + 1
                    continue
                if any(a.HasField("immediate_response") for a in answers):
                    errors["immediate_response"] = errors.get("immediate_response", 0) + 1
                else:
                    latencies.append(time.perf_counter() - t0)

        async with asyncio.TaskGroup() as tg:
            for i in range(concurrency):
                tg.create_task(worker(), name=f"grpc-load-{i}")
    return _result("python-grpc", latencies, errors, time.perf_counter() - started, time.process_time() - cpu0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the load-generator child: run one load and print its JSON result."""
    parser = argparse.ArgumentParser(prog="python -m epp_sim.bench.loadgen", description=__doc__)
    parser.add_argument("mode", choices=("http", "grpc"))
    parser.add_argument("--target", required=True, help="host:port")
    parser.add_argument("--body-file", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--path", default="/v1/completions")
    parser.add_argument("--unique", default="", metavar="RUN", help="HTTP: every prompt ends differently")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    body = args.body_file.read_bytes()
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    if args.mode == "http":
        coro = http_load(
            host,
            int(port),
            path=args.path,
            body=body,
            concurrency=args.concurrency,
            duration=args.duration,
            headers={"content-type": "application/json"},
            unique=args.unique,
        )
    else:
        coro = grpc_load(args.target, body=body, concurrency=args.concurrency, duration=args.duration)
    result = asyncio.run(coro)
    print(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
