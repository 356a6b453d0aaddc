"""The GIE conformance suite's request hook: ``test-epp-endpoint-selection`` names the endpoints.

The suite (GIE ``conformance/``) runs its own lightweight picker, lwepp, and steers each request
with this header: a comma-separated list of ``IP`` (every port of that pod) or ``IP:port`` (that
endpoint only; IPv6 with or without brackets). lwepp keeps the pool's endpoints the list names,
ignoring the gateway's subset hint, and takes them in turn (round-robin). With
``--enable-conformance-test-hooks`` the pipeline does the same, so the suite can run against
this picker; without the flag the header is an ordinary header. A list that names no endpoint of
the pool leaves no candidates, which the pipeline answers like an empty subset (503); lwepp ends
the stream with a gRPC error instead, which a fail-open gateway would route around.
"""

from __future__ import annotations

from collections.abc import Sequence

from epp.framework.endpoint import EndpointState

__all__ = ["RoundRobin", "selected_endpoints"]


def _host_port(item: str) -> tuple[str, int | None] | None:
    """``ip`` → (ip, None); ``ip:port`` / ``[v6]:port`` → (ip, port); None when the port is not a number."""
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif item.count(":") == 1:
        host, _, port = item.partition(":")
    else:
        host, port = item, ""  # a bare IPv4 or IPv6 address
    if not port:
        return host, None
    return (host, int(port)) if port.isdigit() else None


def selected_endpoints(value: str, endpoints: Sequence[EndpointState]) -> list[EndpointState]:
    """The endpoints, in pool order, that the header ``value`` names."""
    hosts: set[str] = set()
    host_ports: set[tuple[str, int]] = set()
    for item in value.split(","):
        parsed = _host_port(item.strip())
        if parsed is None or not parsed[0]:
            continue
        host, port = parsed
        if port is None:
            hosts.add(host)
        else:
            host_ports.add((host, port))
    return [e for e in endpoints if e.endpoint.address in hosts or (e.endpoint.address, e.endpoint.port) in host_ports]


class RoundRobin:
    """Takes the candidates in turn, as lwepp does; one counter per pool."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = 0

    def pick(self, candidates: Sequence[EndpointState]) -> EndpointState:
        """The next candidate, taking the turn; ``candidates`` must not be empty."""
        chosen = self.peek(candidates)
        self._next += 1
        return chosen

    def peek(self, candidates: Sequence[EndpointState]) -> EndpointState:
        """The candidate :meth:`pick` would take now, without taking the turn."""
        return candidates[self._next % len(candidates)]
