"""``epp sim model-server``: flags → SimConfig, and the process serving until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import aiohttp
import pytest

from epp_sim.modelserver.command import add_parser, config_from_args, parse_lora_modules, run
from epp_sim.ports import free_port
from epp_sim.waits import wait_until


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="epp sim")
    add_parser(parser.add_subparsers(dest="sim_command"))
    return parser.parse_args(["model-server", *argv])


def test_flags_build_the_config() -> None:
    args = _parse(
        "--model", "base", "--max-num-seqs", "8", "--num-gpu-blocks-override", "100", "--max-model-len", "1024",
        "--max-num-batched-tokens", "64", "--max-loras", "2",
        "--lora-modules", "a=/p/a", '{"name": "b", "path": "/p/b"}',
        "--time-scale", "10", "--no-enable-prefix-caching",
        "--pin-waiting", "3", "--pin-loras", "a,b", "--pin-kv", "0.5",
    )  # fmt: skip
    cfg = config_from_args(args)
    assert cfg.model == "base" and cfg.max_num_seqs == 8 and cfg.num_gpu_blocks == 100
    assert dict(cfg.lora_modules) == {"a": "/p/a", "b": "/p/b"} and cfg.max_loras == 2
    assert cfg.time_scale == 10.0 and not cfg.enable_prefix_caching
    assert cfg.pins.waiting == 3 and cfg.pins.running_loras == ("a", "b") and cfg.pins.kv_cache_usage == 0.5
    assert args.func is run


def test_served_model_name_wins() -> None:
    assert config_from_args(_parse("--model", "path/to/m", "--served-model-name", "m")).model == "m"


def test_lora_module_forms_and_errors() -> None:
    assert parse_lora_modules(["x=/a", "y"]) == {"x": "/a", "y": "y"}
    with pytest.raises(ValueError, match="invalid JSON"):
        parse_lora_modules(["{bad"])
    with pytest.raises(ValueError, match="expected name=path"):
        parse_lora_modules(["=/a"])


@pytest.mark.parametrize(
    "argv",
    [
        ("--pin-kv", "1.5"),
        ("--num-gpu-blocks", "1", "--max-model-len", "4096"),
        ("--time-scale", "0"),
        ("--lora-modules", "{bad"),
    ],
)
def test_bad_flags_exit_2(argv: tuple[str, ...]) -> None:
    assert run(_parse(*argv)) == 2


async def test_process_serves_until_sigterm() -> None:
    port = free_port("127.0.0.3")
    code = "import sys; from epp_sim.modelserver.command import run, add_parser; import argparse;"
    code += "p = argparse.ArgumentParser(); add_parser(p.add_subparsers());"
    code += "sys.exit(run(p.parse_args(sys.argv[1:])))"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, "model-server", "--host", "127.0.0.3", "--port", str(port), "--model", "tiny",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:

            async def healthy() -> bool:
                try:
                    async with http.get(f"http://127.0.0.3:{port}/health") as resp:
                        return resp.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            await wait_until(healthy, timeout=20, interval=0.05, message="simulator process healthy")
            async with http.get(f"http://127.0.0.3:{port}/v1/models") as resp:
                assert (await resp.json())["data"][0]["id"] == "tiny"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
