"""``epp serve|dev|sim|autoscale|bench``: argument parsing only; each command lives in its package.

Every command module exposes ``add_parser(subparsers)`` which registers its flags and sets
``func`` (a callable taking the parsed namespace and returning an exit code).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from epp import __version__, serve_command
from epp.autoscale import command as autoscale_command
from epp.bench import command as bench_command
from epp.dev import command as dev_command
from epp.sim.apiserver import command as apiserver_command
from epp.sim.modelserver import command as modelserver_command

__all__ = ["build_parser", "main"]

Command = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="epp", description="Endpoint Picker for LLM inference (Envoy ext_proc).")
    parser.add_argument("--version", action="version", version=f"epp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve_command.add_parser(sub)
    sim = sub.add_parser("sim", help="stand-ins for what cannot run here: API server, model servers")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True, metavar="SIM")
    apiserver_command.add_parser(sim_sub)
    modelserver_command.add_parser(sim_sub)
    autoscale_command.add_parser(sub)
    dev_command.add_parser(sub)
    bench_command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Command = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
