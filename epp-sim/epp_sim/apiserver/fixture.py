"""Starting a fake API server for tests and local stacks: an async context manager and a pytest fixture.

``running_apiserver()`` starts an ``ApiServer`` on a free loopback port, writes its kubeconfig
(to ``kubeconfig_path`` or a temporary directory removed afterwards) and stops everything on
exit. ``apiserver_fixture(**options)`` wraps it as a function-scoped pytest fixture.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from epp_sim.apiserver.server import ApiServer

__all__ = ["RunningApiServer", "apiserver_fixture", "running_apiserver"]


class RunningApiServer:
    """A started server and the kubeconfig file that points at it."""

    def __init__(self, server: ApiServer, kubeconfig: Path) -> None:
        self.server = server
        self.kubeconfig = kubeconfig

    @property
    def url(self) -> str:
        return self.server.url


@asynccontextmanager
async def running_apiserver(
    *, kubeconfig_path: Path | None = None, namespace: str = "default", **options: Any
) -> AsyncIterator[RunningApiServer]:
    """Start an ``ApiServer(**options)`` and write its kubeconfig; stop both on exit."""
    tmp: str | None = None
    if kubeconfig_path is None:
        tmp = await asyncio.to_thread(tempfile.mkdtemp, prefix="epp-sim-apiserver-")
        kubeconfig_path = Path(tmp) / "kubeconfig"
    server = ApiServer(**options)
    try:
        await server.start()
        await server.write_kubeconfig(kubeconfig_path, namespace=namespace)
        yield RunningApiServer(server, kubeconfig_path)
    finally:
        await server.aclose()
        if tmp is not None:
            await asyncio.to_thread(shutil.rmtree, tmp, True)


def apiserver_fixture(**options: Any) -> Callable[..., AsyncIterator[RunningApiServer]]:
    """A pytest fixture (function scope) yielding a ``RunningApiServer``; use as ``name = apiserver_fixture()``."""
    import pytest_asyncio  # test-only dependency, imported when a test module asks for the fixture

    @pytest_asyncio.fixture
    async def _apiserver(tmp_path: Path) -> AsyncIterator[RunningApiServer]:
        async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig", **options) as running:
            yield running

    return _apiserver
