"""``--workers``: one process unless asked; more imply the scrape process; out of range is named."""

from __future__ import annotations

import pytest

from epp.cli import build_parser
from epp.config.options import OptionsError, ServeOptions
from epp.extproc.server import ExtProcOptions
from epp.serve_command import options_from_args


def _options(*argv: str) -> ServeOptions:
    return options_from_args(build_parser().parse_args(["serve", "--pool-name", "p", *argv]))


def test_one_process_unless_asked() -> None:
    options = _options()
    assert (options.workers, options.metrics_scrape_process) == (1, False)
    assert ("grpc.so_reuseport", 0) in ExtProcOptions().server_options()


def test_several_share_the_port_and_scrape_in_one_process() -> None:
    options = _options("--workers", "3")
    assert (options.workers, options.metrics_scrape_process) == (3, True)
    assert ("grpc.so_reuseport", 1) in ExtProcOptions(shared_port=True).server_options()


@pytest.mark.parametrize("count", ["0", "65", "-1"])
def test_out_of_range_is_named(count: str) -> None:
    with pytest.raises(OptionsError, match=f"--workers: must be between 1 and 64, got {count}"):
        _options("--workers", count)
