"""``epp explain`` as an operator runs it against a picker: the score table, ``--json``, and its errors."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from epp_sim.pki import make_pki
from epp_sim.ports import free_port
from epp_sim.pytest_plugin import PickerFactory, PoolFactory


async def epp_explain(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "epp",
        "explain",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_epp_explain_prints_the_score_table(epp_pool: PoolFactory, tmp_path: Path) -> None:
    env = await epp_pool("v1", pods=2)
    await env.set_pins([{"waiting": 6}, {"waiting": 0}])
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
    target = env.picker.health_target

    rc, out, err = await epp_explain("--target", target, "-d", f"@{request}", "--path", "/v1/chat/completions")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("pool default/") and "model m -> m" in lines[0]
    assert "admission: admitted" in lines
    header = next(line for line in lines if line.strip().startswith("endpoint"))
    assert "queue-scorer x2" in header and header.rstrip().endswith("total")
    best = next(line for line in lines if line.strip().startswith("* "))
    assert "default/pod-1-rank-0" in best and env.hostport(1) in best and "1.000 -> 2.000" in best
    assert lines[-1] == f"picked: {env.hostport(1)}"

    rc, out, err = await epp_explain(
        "--target", target, "-d", request.read_text(), "--json", "-H", ":path: /v1/chat/completions"
    )
    assert rc == 0, err
    assert json.loads(out)["picked"] == [env.hostport(1)]


async def test_epp_explain_errors_name_the_problem(epp_pool: PoolFactory) -> None:
    env = await epp_pool("v1", pods=1)
    rc, _, err = await epp_explain("--target", env.picker.health_target, "-d", '{"model": "m"}')
    assert rc == 1 and "INVALID_ARGUMENT" in err and "must have prompt field" in err  # the picker's own check
    pool = ("-H", "x-gateway-inference-pool: elsewhere")
    rc, _, err = await epp_explain("--target", env.picker.health_target, "-d", '{"model": "m", "prompt": "x"}', *pool)
    assert rc == 1 and "NOT_FOUND" in err and "unknown inference pool 'elsewhere'" in err
    rc, _, err = await epp_explain("--target", env.picker.health_target, "-d", "{}", "-H", "no-colon")
    assert rc == 2 and "expected 'name: value'" in err
    rc, _, err = await epp_explain("--target", f"127.0.0.1:{free_port()}", "-d", "{}", "--timeout", "2")
    assert rc == 1 and "UNAVAILABLE" in err


async def test_epp_explain_over_the_api_tls_port(epp_picker: PickerFactory, tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    picker = await epp_picker(
        "--endpoint-selector",
        "app=none",
        "--endpoint-target-ports",
        "8000",
        f"--metrics-cert-dir={pki.server_dir}",
        f"--metrics-client-ca-file={pki.ca}",
    )
    body = ("-d", '{"model": "m", "prompt": "hi"}', "--json")
    tls = ("--cacert", str(pki.ca), "--cert", str(pki.client_cert), "--key", str(pki.client_key))
    rc, out, err = await epp_explain("--target", picker.api_target, *body, *tls)
    assert rc == 0, err
    assert json.loads(out)["model"] == "m"
    rc, _, err = await epp_explain("--target", picker.api_target, *body, *tls[:2], "--timeout", "5")
    assert rc == 1 and "UNAVAILABLE" in err  # no client certificate: no handshake
    rc, _, err = await epp_explain("--target", picker.api_target, *body, *tls[:4])
    assert rc == 2 and "--cert and --key go together" in err
