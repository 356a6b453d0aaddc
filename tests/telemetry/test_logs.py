"""Logging setup: -v levels, logfmt and JSON formatters; the request id field when the ContextVar is set.

That the ext_proc stream sets it for a real request is tested in ``tests/extproc/test_extproc_request_logs.py``.
"""

from __future__ import annotations

import io
import json
import logging
import warnings

import pytest

from epp.config.options import LoggingOptions, OptionsError
from epp.telemetry.logs import TRACE, VERBOSE, level_for, level_for_verbosity, request_id_var, setup_logging


@pytest.mark.parametrize(
    ("v", "level"),
    [(0, logging.WARNING), (1, logging.WARNING), (2, logging.INFO), (3, VERBOSE), (4, logging.DEBUG), (5, TRACE)],
)
def test_verbosity_levels(v: int, level: int) -> None:
    assert level_for_verbosity(v) == level


def test_logfmt_with_fields_and_request_id(restore_root_logger: None) -> None:
    out = io.StringIO()
    setup_logging(LoggingOptions(verbosity=2), stream=out)
    log = logging.getLogger("epp.test")
    token = request_id_var.set("req-123")
    try:
        log.info("Endpoint added", extra={"endpoint": "ns/p-rank-0", "note": 'has "quotes" and spaces'})
    finally:
        request_id_var.reset(token)
    log.debug("hidden at -v=2")
    log.warning("no request here")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("ts=")
    assert ' level=info logger=epp.test msg="Endpoint added" request_id=req-123 endpoint=ns/p-rank-0' in lines[0]
    assert 'note="has \\"quotes\\" and spaces"' in lines[0]
    assert "request_id" not in lines[1] and "level=warning" in lines[1]


def test_json_with_exception_and_verbose_level(restore_root_logger: None) -> None:
    out = io.StringIO()
    setup_logging(LoggingOptions(verbosity=3, zap_encoder="json"), stream=out)
    log = logging.getLogger("epp.test")
    log.log(VERBOSE, "verbose line", extra={"count": 3})
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("failed")
    log.debug("hidden at -v=3")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert {k: first[k] for k in ("level", "logger", "msg", "count")} == {
        "level": "verbose",
        "logger": "epp.test",
        "msg": "verbose line",
        "count": 3,
    }
    assert second["level"] == "error" and "ValueError: bad" in second["exc"]


def test_setup_replaces_its_own_handler_and_quiets_http_client_logs(restore_root_logger: None) -> None:
    first, second = io.StringIO(), io.StringIO()
    setup_logging(LoggingOptions(), stream=first)
    setup_logging(LoggingOptions(), stream=second)
    assert sum(1 for h in logging.getLogger().handlers if getattr(h, "_epp_installed", False)) == 1
    logging.getLogger("httpx").info("HTTP Request: GET /api")
    logging.getLogger("epp").info("kept")
    assert first.getvalue() == ""
    assert "kept" in second.getvalue() and "HTTP Request" not in second.getvalue()


@pytest.mark.parametrize(
    ("v", "zap_log_level", "level"),
    [
        (2, "", logging.INFO),
        (4, "", logging.DEBUG),
        (4, "info", logging.INFO),  # --zap-log-level wins over -v
        (2, "debug", logging.DEBUG),
        (2, "error", logging.ERROR),
        (2, "panic", logging.CRITICAL),
        (2, "3", VERBOSE),  # an integer n is -v n
        (2, "5", TRACE),
        (-1, "", logging.INFO),  # a negative -v is upstream's default, 2
    ],
)
def test_zap_log_level_overrides_v(v: int, zap_log_level: str, level: int) -> None:
    assert level_for(LoggingOptions(verbosity=v, zap_log_level=zap_log_level)) == level


@pytest.mark.parametrize("bad", ["warn", "0", "-1", "trace"])
def test_zap_log_level_rejects_what_upstream_rejects(bad: str) -> None:
    with pytest.raises(OptionsError, match="--zap-log-level"):
        LoggingOptions(zap_log_level=bad)


def test_json_mode_turns_warnings_and_odd_extras_into_json_lines(restore_root_logger: None) -> None:
    out = io.StringIO()
    setup_logging(LoggingOptions(zap_encoder="json"), stream=out)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library complains", DeprecationWarning, stacklevel=1)
    logging.getLogger("some.library").info("x", extra={"level": 3, "obj": object(), "text": 'a "b"\nc'})
    warned, odd = (json.loads(line) for line in out.getvalue().splitlines())
    assert warned["logger"] == "py.warnings" and "a library complains" in warned["msg"]
    assert odd["level"] == "info" and odd["obj"].startswith("<object") and odd["text"] == 'a "b"\nc'
