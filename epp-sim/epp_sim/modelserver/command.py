"""``epp sim model-server``: flags (vLLM's names where vLLM has the knob) → SimConfig → serve until signalled."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
from contextlib import AsyncExitStack
from typing import Any

from .config import Pins, PinsError, SimConfig
from .fixture import ModelServer
from .kv_events import KvEventsConfig
from .tokenizer import TokenizerError

__all__ = ["add_parser", "config_from_args", "parse_lora_modules"]

log = logging.getLogger(__name__)

_MAX_RANKS = 8


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``model-server`` under ``epp sim``."""
    d = SimConfig()
    p: argparse.ArgumentParser = subparsers.add_parser(
        "model-server",
        help="a simulated vLLM server (OpenAI API, vLLM /metrics, performance model)",
        description="A stand-in for vLLM: OpenAI-compatible API, vLLM-format /metrics, and a performance model "
        "of continuous batching, KV blocks, prefix caching and LoRA slots. See docs/simulator.md.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (e.g. 127.0.0.N)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0 = any free port)")
    p.add_argument(
        "--data-parallel-size",
        type=int,
        default=1,
        help="data-parallel ranks (1-8): rank r is an engine of its own on --port + r, as vLLM serves them",
    )
    p.add_argument("--model", default=d.model, help="base model name")
    p.add_argument("--served-model-name", default=None, help="name served and used in metrics (default: --model)")
    p.add_argument(
        "--tokenizer",
        default=None,
        help="a tokenizer.json (or a model folder with it, tokenizer_config.json and chat_template.jinja): real "
        "token ids in usage, KV events, render and tokenize (default: 4 characters per token)",
    )
    p.add_argument(
        "--kv-events-config",
        default=None,
        help='vLLM\'s KVEventsConfig JSON, e.g. \'{"enable_kv_cache_events":true,"topic":"kv@..."}\'',
    )
    g = p.add_argument_group("engine")
    g.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs, help="max sequences in a batch")
    g.add_argument("--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens, help="token budget/step")
    g.add_argument(
        "--num-gpu-blocks",
        "--num-gpu-blocks-override",
        dest="num_gpu_blocks",
        type=int,
        default=d.num_gpu_blocks,
        help="KV cache size in blocks",
    )
    g.add_argument("--block-size", type=int, default=d.block_size, help="tokens per KV block")
    g.add_argument("--max-model-len", type=int, default=d.max_model_len, help="context length (prompt + output)")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=d.enable_prefix_caching)
    g.add_argument("--enable-lora", action=argparse.BooleanOptionalAction, default=d.enable_lora)
    g.add_argument(
        "--enable-prompt-tokens-details",
        action="store_true",
        default=d.enable_prompt_tokens_details,
        help="usage carries prompt_tokens_details.cached_tokens (vLLM: off by default)",
    )
    g.add_argument("--max-loras", type=int, default=d.max_loras, help="adapter slots")
    g.add_argument(
        "--lora-modules",
        nargs="+",
        default=[],
        metavar="NAME=PATH",
        help='adapters requests may name: name=path or JSON {"name": ..., "path": ...}',
    )
    t = p.add_argument_group("timing (simulated seconds)")
    t.add_argument("--lora-load-time", type=float, default=d.lora_load_time, help="time to load an adapter")
    t.add_argument("--prefill-time-per-token", type=float, default=d.prefill_time_per_token)
    t.add_argument("--decode-time-base", type=float, default=d.decode_time_base, help="fixed cost of a step")
    t.add_argument("--decode-time-per-seq", type=float, default=d.decode_time_per_seq, help="cost per batched seq")
    t.add_argument(
        "--kv-cache-transfer-latency",
        type=float,
        default=d.kv_transfer_latency,
        help="disaggregated decode: fixed cost of pulling a prompt's KV from the prefill pod",
    )
    t.add_argument(
        "--kv-cache-transfer-time-per-token",
        type=float,
        default=d.kv_transfer_time_per_token,
        help="disaggregated decode: pull time per prompt token not cached here",
    )
    t.add_argument("--time-scale", type=float, default=d.time_scale, help="10 = ten times faster than real time")
    t.add_argument("--default-max-tokens", type=int, default=d.default_max_tokens, help="upper output length")
    t.add_argument("--seed", type=int, default=d.seed, help="seed for output lengths and text")
    pins = p.add_argument_group("pinned /metrics values (tests)")
    pins.add_argument("--pin-waiting", type=int, default=None)
    pins.add_argument("--pin-running", type=int, default=None)
    pins.add_argument("--pin-kv", type=float, default=None, help="KV-cache usage, 0..1")
    pins.add_argument("--pin-loras", default=None, help="running adapters, comma-separated")
    pins.add_argument("--pin-waiting-loras", default=None, help="waiting adapters, comma-separated")
    pins.add_argument("--pin-max-loras", type=int, default=None)
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=run)
    return p


def parse_lora_modules(items: list[str]) -> dict[str, str]:
    """``name=path`` or vLLM's JSON form → {name: path}; ValueError names the bad item."""
    out: dict[str, str] = {}
    for item in items:
        if item.lstrip().startswith("{"):
            try:
                doc = json.loads(item)
            except ValueError as exc:
                raise ValueError(f"--lora-modules {item!r}: invalid JSON: {exc}") from exc
            name, path = (doc.get("name"), doc.get("path")) if isinstance(doc, dict) else (None, None)
        else:
            name, sep, path = item.partition("=")
            if not sep:
                path = name
        if not isinstance(name, str) or not name or not isinstance(path, str):
            raise ValueError(f'--lora-modules {item!r}: expected name=path or {{"name": ..., "path": ...}}')
        out[name] = path
    return out


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """Build and validate the SimConfig the flags describe (ValueError names the problem)."""
    pins = Pins().updated(
        {
            k: v
            for k, v in {
                "waiting": args.pin_waiting,
                "running": args.pin_running,
                "kv_cache_usage": args.pin_kv,
                "running_loras": args.pin_loras,
                "waiting_loras": args.pin_waiting_loras,
                "max_lora": args.pin_max_loras,
            }.items()
            if v is not None
        }
    )
    return SimConfig(
        model=args.served_model_name or args.model,
        lora_modules=parse_lora_modules(args.lora_modules),
        enable_lora=args.enable_lora,
        max_loras=args.max_loras,
        lora_load_time=args.lora_load_time,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_gpu_blocks=args.num_gpu_blocks,
        block_size=args.block_size,
        max_model_len=args.max_model_len,
        enable_prefix_caching=args.enable_prefix_caching,
        prefill_time_per_token=args.prefill_time_per_token,
        decode_time_base=args.decode_time_base,
        decode_time_per_seq=args.decode_time_per_seq,
        kv_transfer_latency=args.kv_cache_transfer_latency,
        kv_transfer_time_per_token=args.kv_cache_transfer_time_per_token,
        default_max_tokens=args.default_max_tokens,
        seed=args.seed,
        time_scale=args.time_scale,
        pins=pins,
        kv_events=KvEventsConfig.parse(args.kv_events_config) if args.kv_events_config else KvEventsConfig(),
        tokenizer=args.tokenizer,
        enable_prompt_tokens_details=args.enable_prompt_tokens_details,
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; exit code 2 on bad flags, 1 if the address cannot be bound."""
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = config_from_args(args)
    except (ValueError, PinsError) as exc:
        log.error("invalid model-server flags: %s", exc)
        return 2
    if not 1 <= args.data_parallel_size <= _MAX_RANKS or (args.port == 0 and args.data_parallel_size > 1):
        log.error(
            "invalid model-server flags: --data-parallel-size must be 1-%d (with a --port other than 0)", _MAX_RANKS
        )
        return 2
    ranks = [ModelServer(config, host=args.host, port=args.port + r) for r in range(args.data_parallel_size)]
    try:
        asyncio.run(_serve(ranks))
    except (OSError, TokenizerError) as exc:
        log.error("%s", exc)
        return 1
    return 0


async def _serve(ranks: list[ModelServer]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with AsyncExitStack() as servers:
        for server in ranks:
            await servers.enter_async_context(server)
            log.info("simulated vLLM serving %s on %s", server.config.model, server.url)
        await stop.wait()
    log.info("simulated vLLM on %s stopped", ", ".join(server.url for server in ranks))
