"""``epp sidecar`` in front of a simulated decode pod, built from the flags a Deployment would give it.

The sidecar runs on the stack's event loop (as the simulators do), bound to the pod's address:
``--port`` is the pool's target port, ``--model-server-port`` where the pod's engine listens,
``--secure-proxy=false`` (the gateway speaks plain HTTP to the pods here), then the caller's flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from epp.sidecar.options import SidecarOptions, add_sidecar_flags, options_from_args
from epp.sidecar.server import Sidecar

__all__ = ["sidecar_for", "sidecar_options"]


def sidecar_options(*argv: str) -> SidecarOptions:
    """The options ``epp sidecar`` would run with, given ``argv`` (SidecarOptionsError names a bad flag)."""
    parser = argparse.ArgumentParser(prog="epp sidecar")
    add_sidecar_flags(parser)
    return options_from_args(parser.parse_args(list(argv)))


def sidecar_for(host: str, port: int, engine_port: int, ranks: int, args: Sequence[str]) -> Sidecar:
    """A sidecar on ``host:port`` (rank r on port + r) in front of the engines on ``engine_port``."""
    return Sidecar(
        sidecar_options(
            f"--port={port}",
            f"--model-server-port={engine_port}",
            f"--model-server-host={host}",
            f"--bind-address={host}",
            f"--data-parallel-size={ranks}",
            "--secure-proxy=false",
            *args,
        )
    )
