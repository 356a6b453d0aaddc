"""Logging for the picker: ``-v`` levels, a structured formatter and the per-request id.

Code logs with the stdlib (``logging.getLogger(__name__)``), fixed messages and fields in
``extra=``; this module turns that into one line per record, either ``key=value`` (logfmt) or JSON.
The ext_proc stream sets :data:`request_id_var` when it learns ``x-request-id``; the
:class:`RequestIdFilter` on our handler copies it onto every record logged in that context.

Verbosity follows upstream's ``-v`` (``pkg/common/observability/logging``): 2 (default) → INFO,
3 → VERBOSE, 4 → DEBUG, 5+ → TRACE; 0–1 → WARNING. ``--zap-log-level`` overrides it.

With ``--zap-encoder json`` every line the process writes to stderr is one JSON object: records of
libraries go through the same root handler, Python warnings are routed into logging, and an
exception's traceback is a string field (``exc``) of its record, never extra lines. (gRPC's C
core prints past Python logging; ``epp serve`` silences it in JSON mode.)
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

__all__ = [
    "TRACE",
    "VERBOSE",
    "JsonFormatter",
    "KeyValueFormatter",
    "LogSettings",
    "RequestIdFilter",
    "level_for",
    "level_for_verbosity",
    "request_id_var",
    "setup_logging",
]

VERBOSE = 15  # between DEBUG and INFO: upstream's V(3)
TRACE = 5  # below DEBUG: upstream's V(5)

request_id_var: ContextVar[str] = ContextVar("epp_request_id", default="")
"""The current request's id (``x-request-id``); empty outside a request."""

_LEVEL_NAMES = {
    TRACE: "trace",
    logging.DEBUG: "debug",
    VERBOSE: "verbose",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}
# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "request_id",
    "taskName",
}
# Libraries that log every HTTP call at INFO (kr8s talks through httpx).
_CHATTY = ("httpx", "httpcore")
_INSTALLED = "_epp_installed"


def level_for_verbosity(verbosity: int) -> int:
    """The stdlib level for upstream's ``-v`` value."""
    if verbosity <= 1:
        return logging.WARNING
    return {2: logging.INFO, 3: VERBOSE, 4: logging.DEBUG}.get(verbosity, TRACE)


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (from :data:`request_id_var`) to every record passing the handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", ""):
            record.request_id = request_id_var.get()
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "level": _LEVEL_NAMES.get(record.levelno, record.levelname.lower()),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    request_id = getattr(record, "request_id", "")
    if request_id:
        fields["request_id"] = request_id
    for key, value in record.__dict__.items():
        if key not in _RESERVED and not key.startswith("_"):
            fields.setdefault(key, value)  # ``extra={"level": ...}`` must not clobber the record's own keys
    return fields


def _exception_text(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    parts = []
    if record.exc_info:
        parts.append(formatter.formatException(record.exc_info))
    if record.stack_info:
        parts.append(formatter.formatStack(record.stack_info))
    return "\n".join(parts)


def _logfmt_value(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if text and not any(c in text for c in ' ="\\\n\t'):
        return text
    return json.dumps(text, ensure_ascii=False)


class KeyValueFormatter(logging.Formatter):
    """``ts=… level=info logger=… msg="…" request_id=… key=value …`` (logfmt), one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record)
        exc = _exception_text(self, record)
        if exc:
            fields["exc"] = exc
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in fields.items())


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the same keys as :class:`KeyValueFormatter`."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record)
        exc = _exception_text(self, record)
        if exc:
            fields["exc"] = exc
        return json.dumps(fields, ensure_ascii=False, default=str)


class LogSettings(Protocol):
    """What logging reads of the ``-v`` and ``--zap-*`` flags (``epp.config.options.LoggingOptions``)."""

    @property
    def verbosity(self) -> int: ...

    @property
    def zap_log_level(self) -> str: ...

    @property
    def zap_encoder(self) -> str: ...


def level_for(options: LogSettings) -> int:
    """The stdlib level: ``--zap-log-level`` when given (a name, or n meaning ``-v n``), else ``-v``."""
    named = {"debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR, "panic": logging.CRITICAL}
    chosen = options.zap_log_level
    if chosen in named:
        return named[chosen]
    return level_for_verbosity(int(chosen) if chosen else options.verbosity)


def setup_logging(options: LogSettings, *, stream: TextIO | None = None) -> logging.Handler:
    """Install our handler on the root logger (replacing one installed earlier); returns it."""
    level = level_for(options)
    json_format = options.zap_encoder == "json"
    for number in (TRACE, VERBOSE):
        logging.addLevelName(number, _LEVEL_NAMES[number].upper())
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _INSTALLED, False)]:
        root.removeHandler(old)
        old.close()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if json_format else KeyValueFormatter())
    handler.addFilter(RequestIdFilter())
    setattr(handler, _INSTALLED, True)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)  # else ``warnings.warn`` writes raw lines to stderr
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if level <= logging.DEBUG else logging.WARNING)
    return handler
