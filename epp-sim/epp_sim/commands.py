"""``epp sim apiserver|model-server``: registered with the ``epp`` command through its entry-point group."""

from __future__ import annotations

import argparse
from typing import Any

from epp_sim.apiserver import command as apiserver_command
from epp_sim.modelserver import command as modelserver_command

__all__ = ["add_sim_parser"]


def add_sim_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``sim`` and its sub-commands on the ``epp`` command's subparsers."""
    sim: argparse.ArgumentParser = subparsers.add_parser(
        "sim", help="stand-ins for what cannot run here: API server, model servers"
    )
    sim_sub = sim.add_subparsers(dest="sim_command", required=True, metavar="SIM")
    apiserver_command.add_parser(sim_sub)
    modelserver_command.add_parser(sim_sub)
    return sim
