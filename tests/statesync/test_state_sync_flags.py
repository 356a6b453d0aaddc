"""``--state-sync-address`` and ``--state-sync-interval``: off by default, validated when parsed, named when wrong."""

from __future__ import annotations

import pytest

from epp.cli import build_parser
from epp.config.options import OptionsError, ServeOptions
from epp.serve_command import options_from_args


def _options(*argv: str) -> ServeOptions:
    return options_from_args(build_parser().parse_args(["serve", "--pool-name", "p", *argv]))


def test_off_unless_asked() -> None:
    assert _options().state_sync is None


def test_an_address_and_an_interval() -> None:
    settings = _options("--state-sync-address", "valkey.ns.svc:6379", "--state-sync-interval", "50ms").state_sync
    assert settings is not None
    assert (settings.address, settings.in_flight_interval, settings.expiry) == ("valkey.ns.svc:6379", 0.05, 0.75)


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--state-sync-address", "http://valkey:6379"], "--state-sync-address: 'http://valkey:6379': scheme 'http'"),
        (["--state-sync-address", "redis://:6379"], "--state-sync-address: 'redis://:6379': no host"),
        (["--state-sync-address", "v:1", "--state-sync-interval", "0s"], "--state-sync-interval must be > 0"),
        (["--state-sync-interval", "soon"], "state-sync-interval"),
    ],
)
def test_refused_naming_the_flag(argv: list[str], problem: str) -> None:
    with pytest.raises(OptionsError, match=problem):
        _options(*argv)
