"""file-discovery: the pool's endpoints from a YAML or JSON file, for a picker running with no Kubernetes at all.

The llm-d router's plugin (``datalayer/discovery/file``), named by ``dataLayer.discovery.pluginRef``.
Parameters: ``path`` (required) and ``watchFile`` (false: read once at start). The file is
upstream's format::

    endpoints:
    - name: vllm-0          # required, the endpoint's identity with its namespace
      namespace: team-a     # optional, "default"
      address: 10.0.0.1     # required, an IPv4 literal (no hostnames, no IPv6)
      port: "8000"          # required, 1-65535 (a string as upstream writes it; a YAML integer is taken too)
      labels: {k: v}        # optional

An endpoint listed twice (same namespace and name) is the last one listed. Each endpoint is served
and scraped on ``address:port``. As upstream: the file is capped at 1 MiB; at start a file that
cannot be read or parsed, or any invalid entry, fails the picker (naming the entry); with
``watchFile`` every change is reloaded (the file is polled by content every second, which also
follows a ConfigMap's symlink swap and an editor's atomic rename), endpoints no longer listed are
removed, an invalid entry is logged and skipped, and a file that cannot be read or parsed keeps
the last good set, logged. Reading and parsing happen off the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from epp.clock import Clock
from epp.framework.discovery import DiscoveredEndpoint, DiscoveryError, DiscoveryNotifier
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind

__all__ = ["MAX_FILE_BYTES", "TYPE", "FileDiscovery", "create", "parse_endpoints"]

TYPE = "file-discovery"
MAX_FILE_BYTES = 1 << 20
DEFAULT_NAMESPACE = "default"
POLL_SECONDS = 1.0
log = logging.getLogger(__name__)


def _entry(index: int, raw: Any) -> DiscoveredEndpoint:
    where = f"endpoints[{index}]"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be a mapping, got {raw!r}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name: required")
    where = f"endpoint {name!r}"
    namespace = raw.get("namespace") or DEFAULT_NAMESPACE
    address = raw.get("address")
    try:
        ipaddress.IPv4Address(address if isinstance(address, str) else "")
    except ValueError:
        raise ValueError(f"{where}: invalid IPv4 address {address!r}") from None
    assert isinstance(address, str)  # IPv4Address refused anything else
    port = raw.get("port")
    number = int(port) if isinstance(port, int) or (isinstance(port, str) and port.isdecimal()) else 0
    if isinstance(port, bool) or not 1 <= number <= 65535:
        raise ValueError(f"{where}: invalid port {port!r}")
    labels = raw.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ValueError(f"{where}: labels must map strings to strings, got {labels!r}")
    if not isinstance(namespace, str):
        raise ValueError(f"{where}: namespace must be a string, got {namespace!r}")
    return DiscoveredEndpoint(name=name, namespace=namespace, address=address, port=number, labels=dict(labels))


def parse_endpoints(data: bytes, source: str) -> tuple[list[DiscoveredEndpoint], list[str]]:
    """The valid endpoints of a file's bytes and the problems of the invalid entries; DiscoveryError for the file."""
    if len(data) > MAX_FILE_BYTES:
        raise DiscoveryError(f"endpoints file {source} exceeds the 1 MiB limit")
    try:
        doc = yaml.safe_load(data) if data.strip() else {}
    except yaml.YAMLError as e:
        raise DiscoveryError(f"parsing {source}: {e}") from e
    if not isinstance(doc, Mapping) or not isinstance(doc.get("endpoints") or [], list):
        raise DiscoveryError(f"parsing {source}: expected a mapping with an 'endpoints' list")
    endpoints: dict[tuple[str, str], DiscoveredEndpoint] = {}
    problems: list[str] = []
    for i, raw in enumerate(doc.get("endpoints") or []):
        try:
            endpoint = _entry(i, raw)
        except ValueError as e:
            problems.append(str(e))
            continue
        endpoints[(endpoint.namespace, endpoint.name)] = endpoint  # listed twice: the last one wins, as upstream
    return list(endpoints.values()), problems


class FileDiscovery(NamedPlugin):
    """Endpoint discovery from one file, read at start and, with ``watch_file``, whenever its content changes."""

    plugin_type = TYPE
    kinds = frozenset({PluginKind.ENDPOINT_DISCOVERY})

    def __init__(self, name: str, *, path: str, watch_file: bool, clock: Clock, interval: float = POLL_SECONDS):
        super().__init__(name)
        self.path = Path(path)
        self.watch_file = watch_file
        self.clock = clock
        self.interval = interval
        self._digest = ""
        self.endpoints: tuple[DiscoveredEndpoint, ...] = ()
        """The set last reported."""
        self.last_error = ""
        """Why the file could not be read at the last poll ("" when it could)."""

    async def _read(self) -> tuple[bytes, list[DiscoveredEndpoint], list[str]]:
        def read() -> tuple[bytes, list[DiscoveredEndpoint], list[str]]:
            try:
                with self.path.open("rb") as f:
                    data = f.read(MAX_FILE_BYTES + 1)
            except OSError as e:
                raise DiscoveryError(f"reading {self.path}: {e}") from e
            return (data, *parse_endpoints(data, str(self.path)))

        return await asyncio.to_thread(read)

    async def load(self) -> Sequence[DiscoveredEndpoint]:
        data, endpoints, problems = await self._read()
        if problems:
            raise DiscoveryError(f"{TYPE}: initial load of {self.path} failed: {'; '.join(problems)}")
        self._digest = hashlib.sha256(data).hexdigest()
        self.endpoints = tuple(endpoints)
        return self.endpoints

    async def watch(self, notifier: DiscoveryNotifier) -> None:
        if not self.watch_file:
            return
        while True:
            await self.clock.sleep(self.interval)
            try:
                data, endpoints, problems = await self._read()
            except DiscoveryError as e:
                if str(e) != self.last_error:  # logged once per distinct failure, not every poll
                    log.error("endpoints file unreadable; keeping the last endpoints", extra={"error": str(e)})
                self.last_error = str(e)
                continue
            self.last_error = ""
            digest = hashlib.sha256(data).hexdigest()
            if digest == self._digest:
                continue
            self._digest = digest
            for problem in problems:
                log.error("endpoints file entry skipped", extra={"path": str(self.path), "error": problem})
            self.endpoints = tuple(endpoints)
            log.info("endpoints file reloaded", extra={"path": str(self.path), "endpoints": len(endpoints)})
            notifier.replace(self.endpoints)


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> FileDiscovery:
    """Factory; upstream's ``path`` (required) and ``watchFile``."""
    p = Params(TYPE, parameters)
    path = p.text("path") or ""
    watch_file = p.boolean("watchFile", False)
    p.done()
    if not path:
        raise PluginConfigError(f"{TYPE}.parameters.path: required")
    return FileDiscovery(name, path=path, watch_file=watch_file, clock=context.clock)
