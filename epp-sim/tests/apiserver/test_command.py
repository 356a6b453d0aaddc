"""``epp sim apiserver``: flags, and the process serving (with its kubeconfig) until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

import aiohttp
import yaml

from epp_sim.apiserver.command import add_parser, run
from epp_sim.waits import wait_until


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="epp sim")
    add_parser(parser.add_subparsers(dest="sim_command"))
    return parser.parse_args(["apiserver", *argv])


def test_flags_and_bad_values() -> None:
    args = _parse("--port", "0", "--kubeconfig-out", "/tmp/k", "--pod-grace-seconds", "2")
    assert (args.host, args.port, args.kubeconfig_out, args.pod_grace_seconds) == ("127.0.0.1", 0, Path("/tmp/k"), 2.0)
    assert args.func is run
    assert run(_parse("--port", "70000")) == 2
    assert run(_parse("--bookmark-interval", "0")) == 2


async def test_process_writes_kubeconfig_and_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    code = "import sys, argparse; from epp_sim.apiserver.command import run, add_parser;"
    code += "p = argparse.ArgumentParser(); add_parser(p.add_subparsers());"
    code += "sys.exit(run(p.parse_args(sys.argv[1:])))"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, "apiserver", "--host", "127.0.0.4", "--kubeconfig-out", str(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        await wait_until(kubeconfig.exists, timeout=20, message="kubeconfig written")
        config = yaml.safe_load(kubeconfig.read_text())
        url = config["clusters"][0]["cluster"]["server"]
        assert url.startswith("http://127.0.0.4:") and config["current-context"] == "epp-sim"
        async with aiohttp.ClientSession() as http, http.get(f"{url}/api/v1/namespaces/default") as resp:
            assert (await resp.json())["status"]["phase"] == "Active"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        assert proc.stdout is not None
        assert (await proc.stdout.read()).decode().strip() == f"fake API server on {url}"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
