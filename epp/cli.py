"""``epp COMMAND``: argument parsing only; each command lives in its package.

The picker's own commands (``serve``, ``autoscale``, ``explain``, a client of a running
picker, and ``sidecar``, the decode pod's proxy of disaggregated serving) are registered here. The tooling commands
(``sim``, ``dev``, ``bench``) belong to the ``epp-sim`` distribution, which registers them in the
``epp.commands`` entry-point group; they appear when it is installed, and a one-line message names
the distribution when it is not. Only the module of the command being run is imported, so
``epp serve`` never loads a simulator, a benchmark or the local stack.

Every command module exposes ``add_parser(subparsers)``, which registers its flags and sets
``func`` (a callable taking the parsed namespace and returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from epp import __version__

__all__ = ["COMMAND_GROUP", "TOOLING_DISTRIBUTION", "build_parser", "main"]

COMMAND_GROUP = "epp.commands"
TOOLING_DISTRIBUTION = "epp-sim"
# The tooling distribution's commands, named here only to say where they went when it is missing.
_TOOLING_COMMANDS = ("sim", "dev", "bench")
# Our own commands: name → module with add_parser, imported only when needed.
_CORE_COMMANDS = {
    "serve": "epp.serve_command",
    "autoscale": "epp.autoscale.command",
    "explain": "epp.api.explain_command",
    "sidecar": "epp.sidecar.command",
}

Command = Callable[[argparse.Namespace], int]
AddParser = Callable[[Any], argparse.ArgumentParser]


def _tooling_commands() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=COMMAND_GROUP) if ep.name not in _CORE_COMMANDS}


def _chosen(argv: Sequence[str]) -> str | None:
    """The command word: the first argument that is not an option (``None`` for ``--help``)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
        if arg in ("-h", "--help", "--version"):
            return None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``epp`` parser with every command, or with just ``only`` (its module alone is imported)."""
    parser = argparse.ArgumentParser(prog="epp", description="Endpoint Picker for LLM inference (Envoy ext_proc).")
    parser.add_argument("--version", action="version", version=f"epp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    tooling = _tooling_commands()
    for name, module in _CORE_COMMANDS.items():
        if only in (None, name):
            add: AddParser = importlib.import_module(module).add_parser
            add(sub)
    for name, entry_point in tooling.items():
        if only in (None, name):
            entry_point.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    name = _chosen(args_in)
    known = name in _CORE_COMMANDS or (name is not None and name in _tooling_commands())
    if name in _TOOLING_COMMANDS and not known:
        print(
            f"epp: '{name}' comes with the {TOOLING_DISTRIBUTION} distribution, which is not installed "
            f"(pip install {TOOLING_DISTRIBUTION})",
            file=sys.stderr,
        )
        return 2
    parser = build_parser(name if known else None)
    args = parser.parse_args(args_in)
    func: Command = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
