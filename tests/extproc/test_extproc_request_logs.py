"""Every log line of a request carries its id: real streams through the real server, real log lines."""

from __future__ import annotations

import io
import json
import uuid

from extproc_harness import Running, post_headers, request_body, request_headers, set_headers

from epp.config.options import LoggingOptions
from epp.telemetry.logs import setup_logging

BODY = b'{"prompt":"hi","model":"m"}'


def _routed_lines(out: io.StringIO) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return [line for line in lines if line["msg"] == "request routed"]


async def test_interleaved_streams_log_their_own_request_id(running: Running, restore_root_logger: None) -> None:
    out = io.StringIO()
    setup_logging(LoggingOptions(verbosity=4, zap_encoder="json"), stream=out)
    first, second = running.open(), running.open()
    await first.send(request_headers(post_headers(**{"x-request-id": "rid-first"})))
    await second.send(request_headers(post_headers(**{"x-request-id": "rid-second"})))
    await second.send(request_body(BODY))
    await second.recv(2)
    await first.send(request_body(BODY))
    await first.recv(2)
    await first.end()
    await second.end()

    assert [line["request_id"] for line in _routed_lines(out)] == ["rid-second", "rid-first"]


async def test_a_request_without_an_id_logs_the_one_the_picker_made_up(
    running: Running, restore_root_logger: None
) -> None:
    out = io.StringIO()
    setup_logging(LoggingOptions(verbosity=4), stream=out)
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(BODY))
    head, _ = await call.recv(2)
    await call.end()

    made_up = set_headers(head.request_headers.response.header_mutation)["x-request-id"].decode()
    assert uuid.UUID(made_up)
    (line,) = [line for line in out.getvalue().splitlines() if 'msg="request routed"' in line]
    assert f"request_id={made_up} " in line
