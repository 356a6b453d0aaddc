"""Which engine a pod template runs (vLLM or SGLang) and the capacity-relevant arguments it passes.

Detection follows upstream (#1351): a container whose image mentions ``sglang`` or whose command
runs ``sglang.launch_server`` / ``sglang serve`` is SGLang; everything else is vLLM. The arguments
feed the V2 analyzer when a replica does not report its KV-cache size (no
``vllm:cache_config_info``) and its compute-bound estimate: upstream's ``ParseVLLMArgs`` /
``ParseSGLangArgs`` — ``--max-num-batched-tokens`` (SGLang ``--max-prefill-tokens``),
``--max-num-seqs`` (``--max-running-requests``), ``--block-size`` (``--page-size``),
``--num-gpu-blocks-override`` (``--max-total-tokens``), ``--max-model-len`` (``--context-length``)
and ``VLLM_USE_V1=0``; ``sh -c "..."`` commands are split like a shell would.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SGLANG", "VLLM", "EngineParams", "engine_of", "engine_params"]

VLLM = "vllm"
SGLANG = "sglang"

_VLLM_KEYS = {
    "max_num_batched_tokens": "max_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "block_size": "block_size",
    "num_gpu_blocks_override": "num_gpu_blocks",
    "max_model_len": "max_model_len",
}
_SGLANG_KEYS = {
    "max_prefill_tokens": "max_batched_tokens",
    "max_running_requests": "max_num_seqs",
    "page_size": "block_size",
    "max_total_tokens": "total_tokens",
    "context_length": "max_model_len",
}


@dataclass(frozen=True, slots=True)
class EngineParams:
    """What the arguments say about a replica's capacity (0: not given)."""

    engine: str = VLLM
    max_batched_tokens: int = 0
    max_num_seqs: int = 256
    block_size: int = 16
    num_gpu_blocks: int = 0
    total_tokens: int = 0
    max_model_len: int = 0
    v1_engine: bool = True

    @property
    def kv_tokens(self) -> int:
        """KV capacity in tokens the arguments pin (``--num-gpu-blocks-override × block`` or ``--max-total-tokens``)."""
        return self.total_tokens or self.num_gpu_blocks * self.block_size

    @property
    def effective_batched_tokens(self) -> int:
        """Upstream's ``resolveEffectiveMaxBatchedTokens``: the flag, else 8192 (V1 engine) or 2048 (V0)."""
        if self.max_batched_tokens > 0:
            return self.max_batched_tokens
        return 8192 if self.v1_engine else 2048


def _containers(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((template.get("spec") or {}).get("containers") or ())


def _words(container: Mapping[str, Any]) -> list[str]:
    words = [str(w) for w in list(container.get("command") or ()) + list(container.get("args") or ())]
    for i, word in enumerate(words[:-2]):
        if word in ("sh", "bash", "/bin/sh", "/bin/bash") and words[i + 1] == "-c":
            try:
                return shlex.split(words[i + 2])
            except ValueError:
                return words[i + 2].split()
    return words


def engine_of(template: Mapping[str, Any]) -> str:
    """``sglang`` when a container's image or command says so, else ``vllm`` (upstream's detection)."""
    for c in _containers(template):
        command = " ".join(_words(c)).lower()
        if (
            "sglang" in str(c.get("image") or "").lower()
            or "sglang.launch_server" in command
            or "sglang serve" in command
        ):
            return SGLANG
    return VLLM


def _pairs(words: Sequence[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            key, eq, value = word.partition("=")
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("--"):
                value = words[i + 1]
                i += 1
            out.append((key.lstrip("-").replace("-", "_"), value))
        i += 1
    return out


def engine_params(template: Mapping[str, Any]) -> EngineParams:
    """Parse every container's arguments; unparseable values keep the default."""
    engine = engine_of(template)
    keys = _SGLANG_KEYS if engine == SGLANG else _VLLM_KEYS
    values: dict[str, Any] = {"engine": engine}
    if engine == SGLANG:
        values["block_size"] = 1
    for c in _containers(template):
        for env in c.get("env") or ():
            if env.get("name") == "VLLM_USE_V1" and str(env.get("value")) == "0" and engine == VLLM:
                values["v1_engine"] = False
        for key, value in _pairs(_words(c)):
            if key in keys:
                try:
                    values[keys[key]] = int(value)
                except ValueError:
                    continue
    return EngineParams(**values)
