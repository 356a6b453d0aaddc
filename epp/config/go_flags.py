"""Go-style flag values and the logging flags that ``epp serve`` and ``epp sidecar`` share.

Booleans follow Go's ``strconv.ParseBool`` (``--tracing=false``, ``--tracing false``, bare
``--tracing``); a value the GIE chart writes in quotes (``--total-queued-requests-metric="x"``)
has its quotes removed, as the shell would have done. ``-v`` and the ``--zap-*`` flags are the
upstream runner's logging options, read before anything else so a bad flag elsewhere is still
logged as asked.
"""

from __future__ import annotations

import argparse
from typing import Any

from epp.config.options import LoggingOptions

__all__ = ["add_logging_flags", "flag", "go_bool", "logging_options_from_args", "switch", "unquote"]


def go_bool(text: str) -> bool:
    """Go's strconv.ParseBool, so ``--secure-serving=false`` works as upstream."""
    value = unquote(text).strip().lower()
    if value in ("1", "t", "true", "yes", "on"):
        return True
    if value in ("0", "f", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


def unquote(text: str) -> str:
    """``"x"`` → ``x``: the GIE chart writes some values with the quotes inside the argument."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def flag(group: Any, name: str, **kw: Any) -> None:
    group.add_argument(name, **kw)


def switch(group: Any, name: str, default: bool, help_text: str) -> None:
    group.add_argument(name, type=go_bool, nargs="?", const=True, default=default, help=help_text)


def add_logging_flags(diag: Any) -> None:
    """``-v`` and the ``--zap-*`` flags (``epp serve``'s, shared by ``epp sidecar``)."""
    diag.add_argument(
        "-v",
        "--v",
        dest="verbosity",
        type=int,
        default=2,
        help="log verbosity: 0-1 warnings, 2 info, 3 verbose, 4 debug, 5 trace",
    )
    flag(diag, "--zap-log-level", default="", help="debug, info, error, panic, or an integer n (-v n); overrides -v")
    flag(diag, "--zap-encoder", default="console", help="json (one JSON object per line) or console (key=value lines)")
    switch(diag, "--zap-devel", True, "zap's development mode (no effect: --zap-encoder decides; noted at start)")
    flag(
        diag,
        "--zap-stacktrace-level",
        default="",
        help="info, error or panic (no effect: every logged exception carries its traceback; noted at start)",
    )
    flag(
        diag,
        "--zap-time-encoding",
        default="",
        help="epoch, millis, nano, iso8601, rfc3339, rfc3339nano (no effect: ts is RFC 3339 UTC; noted at start)",
    )


def logging_options_from_args(args: argparse.Namespace) -> LoggingOptions:
    """``-v`` and the ``--zap-*`` flags alone (so a bad flag elsewhere is still logged as asked)."""
    return LoggingOptions(
        verbosity=args.verbosity,
        zap_log_level=unquote(args.zap_log_level),
        zap_encoder=unquote(args.zap_encoder),  # type: ignore[arg-type]  # checked by LoggingOptions
        zap_devel=args.zap_devel,
        zap_stacktrace_level=unquote(args.zap_stacktrace_level),
        zap_time_encoding=unquote(args.zap_time_encoding),
    )
