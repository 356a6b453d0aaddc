"""Start simulated model servers in-process: one (:class:`ModelServer`) or N (:func:`model_servers`).

Each listens on its own loopback address (``127.0.0.2``, ``127.0.0.3``, …), so N "pods" can
share one port number exactly as an InferencePool's target port expects. Used by the hermetic
tests, ``epp dev``, the benchmarks and the autoscaler's simulated Deployments.

    async with model_servers(3, config=SimConfig(max_num_seqs=8)) as servers:
        servers[0].pin(waiting=5, kv_cache_usage=0.9)
        ... servers[1].url ... servers[1].stats()["by_model"]
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any

from aiohttp import web

from epp.clock import Clock

from .app import SimServer
from .config import Pins, SimConfig
from .engine import Engine
from .kv_events import KvEventPublisher
from .tokenizer import SimTokenizer

__all__ = ["ModelServer", "model_servers"]


class ModelServer:
    """One simulated vLLM server on ``host:port`` (port 0 picks a free one at :meth:`start`)."""

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Clock | None = None,
        shutdown_timeout: float = 1.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context``: serve HTTPS (vLLM's ``--ssl-certfile``), for tests of TLS between pods."""
        self.config = config or SimConfig()
        self.host = host
        self._port = port
        self._ssl = ssl_context
        self._clock = clock
        self._shutdown_timeout = shutdown_timeout
        self._engine: Engine | None = None
        self._server: SimServer | None = None
        self._runner: web.AppRunner | None = None
        #: the KV-event publisher while serving with ``kv_events`` enabled (its ``endpoint``, ``seq``)
        self.kv_events: KvEventPublisher | None = None

    @property
    def port(self) -> int:
        """The bound port (the requested one until :meth:`start`)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` (``https`` when serving TLS; IPv6 hosts bracketed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self._ssl is not None else 'http'}://{host}:{self._port}"

    @property
    def address(self) -> str:
        """``host:port``, as an endpoint picker names its destination."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self._port}"

    @property
    def engine(self) -> Engine:
        """The performance model (for tests that look inside)."""
        if self._engine is None:
            raise RuntimeError("model server not started")
        return self._engine

    async def start(self) -> None:
        """Bind the socket, start the engine and serve."""
        if self._runner is not None:
            raise RuntimeError("model server already started")
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._port))
        except OSError as exc:
            sock.close()
            raise OSError(exc.errno, f"model server cannot bind {self.host}:{self._port}: {exc.strerror}") from exc
        self._port = sock.getsockname()[1]
        cfg = self.config
        tokenizer = SimTokenizer(cfg.tokenizer) if cfg.tokenizer else None
        publisher = None
        if cfg.kv_events.effective_publisher == "zmq":
            publisher = KvEventPublisher(cfg.kv_events, host=self.host)
            try:
                await publisher.start()
            except OSError:
                sock.close()
                raise
        engine = Engine(cfg, clock=self._clock, on_kv_events=publisher.publish if publisher is not None else None)
        server = SimServer(engine, tokenizer, address=self.address)
        runner = web.AppRunner(
            server.make_app(),
            access_log=None,
            handle_signals=False,
            shutdown_timeout=self._shutdown_timeout,
            # A client that goes away cancels its handler, which aborts the request and frees
            # its KV blocks, as vLLM aborts requests whose connection dropped.
            handler_cancellation=True,
        )
        try:
            await engine.start()
            await runner.setup()
            await web.SockSite(runner, sock, ssl_context=self._ssl).start()
        except BaseException:
            await runner.cleanup()
            await engine.stop()
            if publisher is not None:
                await publisher.stop()
            sock.close()
            raise
        self._engine, self._server, self._runner = engine, server, runner
        self.kv_events = publisher

    async def stop(self) -> None:
        """Stop serving; in-flight requests end with 503 (or an error event if streaming)."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        try:
            await self.engine.stop()
        finally:
            await runner.cleanup()
            publisher, self.kv_events = self.kv_events, None
            if publisher is not None:
                await publisher.stop()

    async def __aenter__(self) -> ModelServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def pin(self, **fields: Any) -> Pins:
        """Pin reported values (``waiting``, ``running``, ``kv_cache_usage``, ``running_loras``,
        ``waiting_loras``, ``max_lora``, and ``gauges``: extra gauges by name); ``None`` unpins one field.
        Returns the pins now in force."""
        self.engine.set_pins(self.engine.pins.updated(fields))
        return self.engine.pins

    def unpin(self) -> None:
        """Report the model's own values again."""
        self.engine.set_pins(Pins())

    def fail(self, status: int = 500) -> None:
        """Answer every completion with ``status`` (``/metrics`` still answers) until :meth:`recover`."""
        if self._server is None:
            raise RuntimeError("model server not started")
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error status (400-599), got {status}")
        self._server.failing = status

    def recover(self) -> None:
        """Serve completions again."""
        if self._server is not None:
            self._server.failing = 0

    def stats(self) -> dict[str, Any]:
        """What ``GET /_sim/stats`` returns."""
        if self._server is None:
            raise RuntimeError("model server not started")
        return self._server.stats()

    def __repr__(self) -> str:
        return f"ModelServer({self.config.model!r} at {self.address})"


@asynccontextmanager
async def model_servers(
    n: int,
    *,
    base_ip: str = "127.0.0.",
    start: int = 2,
    port: int = 0,
    config: SimConfig | Sequence[SimConfig] | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[list[ModelServer]]:
    """Start ``n`` servers on ``{base_ip}{start}``, ``{base_ip}{start+1}``, …; stop them all on exit.

    ``config`` is one config for all, or one per server; ``port`` 0 gives each a free port.
    """
    configs = [config or SimConfig()] * n if config is None or isinstance(config, SimConfig) else list(config)
    if len(configs) != n:
        raise ValueError(f"got {len(configs)} configs for {n} servers")
    if start + n - 1 > 254:
        raise ValueError(f"addresses {base_ip}{start}..{base_ip}{start + n - 1} run past .254")
    async with AsyncExitStack() as stack:
        servers = []
        for i, cfg in enumerate(configs):
            server = ModelServer(cfg, host=f"{base_ip}{start + i}", port=port, clock=clock)
            servers.append(await stack.enter_async_context(server))
        yield servers
