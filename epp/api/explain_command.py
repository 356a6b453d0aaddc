"""``epp explain``: ask a running picker why a request would go where it goes, and print the score table.

A client of the picker's ``epp.v1.Explain`` service (on its health port, 9003 by default, or
with ``--metrics-cert-dir`` on ``--epp-api-port`` over TLS: ``--cacert``, ``--cert``, ``--key``). The
request is given as a client would send it: ``-d`` with the JSON body (``@file``, ``@-`` for
stdin, or the text itself), ``-H 'name: value'`` for headers, ``--path`` for the API. The
answer is printed as a table per scheduling profile (filters, then each scorer's raw → weighted
score per endpoint, the total, the pick); ``--json`` prints the message itself. A decision that
would fail (404, 429, 503) is an answer, printed with its status; the exit code is 1 only when
the picker could not be asked.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

import grpc

from epp.api import pb

__all__ = ["add_parser", "render", "run"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "explain",
        help="why a request would go to that pod (asks a running picker's epp.v1.Explain)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", default="127.0.0.1:9003", help="the picker's health port (or --epp-api-port), host:port")
    p.add_argument("-d", "--data", required=True, help="the JSON body: @file, @- (stdin) or the text")
    p.add_argument("-H", "--header", action="append", default=[], help="a request header 'name: value' (repeatable)")
    p.add_argument("--path", default="", help="the request path, e.g. /v1/chat/completions (picks the API)")
    p.add_argument("--token-file", default="", help="a file holding a bearer token (with --metrics-endpoint-auth)")
    p.add_argument("--cacert", default="", help="TLS (--epp-api-port, with --metrics-cert-dir): the CA file to trust")
    p.add_argument("--cert", default="", help="TLS: a client certificate file (with --metrics-client-ca-file)")
    p.add_argument("--key", default="", help="TLS: the client certificate's key file")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the answer")
    p.add_argument("--json", action="store_true", help="print the ExplainResponse as JSON instead of tables")
    p.set_defaults(func=run)
    return p


def _body(data: str) -> bytes:
    if data == "@-":
        return sys.stdin.buffer.read()
    if data.startswith("@"):
        return Path(data[1:]).read_bytes()
    return data.encode()


def _headers(lines: list[str], path: str) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if line.startswith(":"):  # a pseudo-header such as ':path: /v1/chat/completions'
            name, sep, value = line[1:].partition(":")
            name = ":" + name
        if not sep or not name.strip():
            raise ValueError(f"-H {line!r}: expected 'name: value'")
        headers[name.strip().lower()] = value.strip()
    if path:
        headers[":path"] = path
    return headers


def _credentials(cacert: str, cert: str, key: str) -> grpc.ChannelCredentials | None:
    """TLS when any of the three is given (no CA file: the system's roots); None for plaintext."""
    if bool(cert) != bool(key):
        raise ValueError("--cert and --key go together")
    if not (cacert or cert):
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=Path(cacert).read_bytes() if cacert else None,
        private_key=Path(key).read_bytes() if key else None,
        certificate_chain=Path(cert).read_bytes() if cert else None,
    )


def run(args: argparse.Namespace) -> int:
    try:
        request = pb.ExplainRequest(headers=_headers(args.header, args.path), body=_body(args.data))
        metadata: tuple[tuple[str, str], ...] = ()
        if args.token_file:
            metadata = (("authorization", f"Bearer {Path(args.token_file).read_text().strip()}"),)
        credentials = _credentials(args.cacert, args.cert, args.key)
    except (OSError, ValueError) as e:
        print(f"epp explain: {e}", file=sys.stderr)
        return 2
    try:
        with (
            grpc.secure_channel(args.target, credentials) if credentials else grpc.insecure_channel(args.target)
        ) as channel:
            answer = pb.ExplainStub(channel).Explain(request, timeout=args.timeout, metadata=metadata)
    except grpc.RpcError as e:
        print(f"epp explain: {args.target}: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    if args.json:
        print(pb.to_json(answer))
    else:
        render(answer, sys.stdout)
    return 0


def render(answer: Any, out: TextIO) -> None:
    """The explanation as text: the request as resolved, admission, one table per profile, the pick."""
    objective = answer.objective or "-"
    out.write(
        f"pool {answer.pool}  model {answer.model} -> {answer.target_model}  "
        f"objective {objective}  priority {answer.priority}\n"
    )
    if answer.HasField("admission"):
        verdict = pb.Admission.Verdict.Name(answer.admission.verdict).lower().replace("_", "-")
        reason = f" ({answer.admission.reason})" if answer.admission.reason else ""
        out.write(f"admission: {verdict}{reason}\n")
    for predictions in answer.latency:
        _latency_table(predictions, out)
    for profile in answer.profiles:
        primary = " (primary)" if profile.name == answer.primary_profile else ""
        out.write(f"\nprofile {profile.name}{primary}\n")
        for f in profile.filters:
            out.write(f"  filter {f.plugin}: kept {len(f.kept)} ({', '.join(f.kept) or 'none'})\n")
        _score_table(profile, out)
        if profile.error:
            out.write(f"  error: {profile.error}\n")
        elif profile.targets:
            out.write(f"  picker {profile.picker}: {', '.join(profile.targets)}\n")
    if answer.HasField("disaggregation"):
        _stages(answer.disaggregation, out)
    for failure in answer.plugin_failures:
        out.write(f"\nplugin {failure.plugin} ({failure.extension_point}) failed, {failure.reason}: {failure.detail}")
    if answer.plugin_failures:
        out.write("\n")
    if answer.HasField("failure"):
        out.write(f"\nfails with {answer.failure.http_status}: {answer.failure.message}\n")
        return
    out.write(f"\npicked: {', '.join(answer.picked)}\n")
    if answer.destination and answer.destination != ",".join(answer.picked):
        out.write(f"destination: {answer.destination}\n")
    for name, value in sorted(answer.upstream_headers.items()):
        out.write(f"forwarded with {name}: {value}\n")


def _stages(decision: Any, out: TextIO) -> None:
    """Each disaggregation stage: ran or skipped, why, and the decider's numbers."""
    out.write(f"\ndisaggregation ({decision.handler}): {decision.decision}\n")
    for stage in decision.stages:
        state = "ran" if stage.ran else "skipped"
        decider = f" [{stage.decider}]" if stage.decider else ""
        out.write(f"  {stage.stage} (profile {stage.profile}): {state}{decider}: {stage.reason}\n")
        if stage.numbers:
            numbers = ", ".join(f"{k}={v:g}" for k, v in sorted(stage.numbers.items()))
            out.write(f"    {numbers}\n")


def _latency_table(predictions: Any, out: TextIO) -> None:
    """A latency producer's predictions: per endpoint, predicted TTFT / TPOT and the headroom to the SLOs."""
    ttft = f"{predictions.ttft_slo_ms:g} ms" if predictions.ttft_slo_ms else "none"
    tpot = f"{predictions.tpot_slo_ms:g} ms" if predictions.tpot_slo_ms else "none"
    out.write(f"\nlatency ({predictions.producer}): SLO TTFT {ttft}, TPOT {tpot}\n")
    if not predictions.endpoints:
        out.write("  no prediction (no model yet): the SLO plugins fall back\n")
        return
    _table(
        ["endpoint", "address", "ttft ms", "tpot ms", "ttft headroom", "tpot headroom", "valid", "in flight"],
        [
            [
                "  " + e.key,
                e.address,
                f"{e.ttft_ms:.1f}",
                f"{e.tpot_ms:.1f}",
                f"{e.ttft_headroom_ms:.1f}",
                f"{e.tpot_headroom_ms:.1f}",
                "yes" if e.valid else "no",
                str(e.dispatched),
            ]
            for e in sorted(predictions.endpoints, key=lambda e: e.key)
        ],
        out,
    )


def _table(head: list[str], rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(str(c)) for c in column) for column in zip(head, *rows, strict=False)]
    for row in (head, *rows):
        out.write("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() + "\n")


def _score_table(profile: Any, out: TextIO) -> None:
    """One row per endpoint that passed the filters: raw -> weighted per scorer, then the total."""
    if not profile.endpoints:
        return
    head = ["endpoint", "address", *(f"{_short(s.plugin)} x{s.weight:g}" for s in profile.scorers), "total"]
    targets = set(profile.targets)
    rows = [
        [
            ("* " if e.key in targets else "  ") + e.key,
            e.address,
            *(f"{s.raw:.3f} -> {s.weighted:.3f}" for s in e.scores),
            f"{e.total:.3f}",
        ]
        for e in sorted(profile.endpoints, key=lambda e: (-e.total, e.key))
    ]
    _table(head, rows, out)


def _short(plugin: str) -> str:
    """``type/name``, or just ``type`` when the plugin is named after its type (the usual case)."""
    kind, _, name = plugin.partition("/")
    return kind if name in ("", kind) else plugin
