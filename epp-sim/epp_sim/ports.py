"""Free TCP ports on loopback addresses, for servers and child processes that need a fixed port."""

from __future__ import annotations

import socket
from collections.abc import Sequence

__all__ = ["common_free_port", "consecutive_free_ports", "free_port", "port_free_on"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def port_free_on(hosts: Sequence[str], port: int) -> bool:
    """True if ``port`` can be bound on every one of ``hosts`` right now."""
    for host in hosts:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def common_free_port(hosts: Sequence[str], *, attempts: int = 20) -> int:
    """A port free on every host (simulated pods share one target port on their own addresses)."""
    for _ in range(attempts):
        port = free_port(hosts[0])
        if port_free_on(hosts[1:], port):
            return port
    raise OSError(f"no port found free on all of {hosts[0]}..{hosts[-1]}")


def consecutive_free_ports(hosts: Sequence[str], count: int, *, attempts: int = 50) -> int:
    """The first of ``count`` consecutive ports free on every host (data-parallel ranks: port + r)."""
    for _ in range(attempts):
        first = common_free_port(hosts)
        if first + count - 1 <= 65535 and all(port_free_on(hosts, first + r) for r in range(1, count)):
            return first
    raise OSError(f"no {count} consecutive ports found free on all of {list(hosts)}")
