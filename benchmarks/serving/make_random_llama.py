"""Write a random-weight checkpoint of the Llama-3-8B shape (BENCHMARKS.md: vocab 128256,
hidden 4096, 32 layers, 32 heads, 8 KV heads, FFN 14336, untied head, bf16), saved like a
real one (config.json + sharded safetensors + index), with a tokenizer copied beside it.
Serving speed does not depend on weight values, and no weights can be downloaded there.

    python -m benchmarks.serving.make_random_llama OUT_DIR --tokenizer TOKENIZER_DIR
"""
from __future__ import annotations

import argparse
import json
import os
import shutil

import torch

SHAPE = dict(vocab_size=128256, hidden_size=4096, num_hidden_layers=32,
             num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
             max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
             tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001)
SHARD_BYTES = 4 << 30


def tokenizer_vocab_size(tokenizer_dir: str) -> int:
    from transformers import AutoTokenizer
    return len(AutoTokenizer.from_pretrained(tokenizer_dir))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--tokenizer", required=True, help="directory holding tokenizer.json")
    p.add_argument("--num-layers", type=int, default=SHAPE["num_hidden_layers"])
    args = p.parse_args()

    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**SHAPE, "num_hidden_layers": args.num_layers},
                         torch_dtype="bfloat16")
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in LlamaForCausalLM(config).state_dict().items()}
    os.makedirs(args.out, exist_ok=True)
    config.save_pretrained(args.out)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device).manual_seed(0)
    shard, shard_bytes, weight_map, num_shards = {}, 0, {}, 0

    def flush():
        nonlocal shard, shard_bytes, num_shards
        num_shards += 1
        name = f"model-{num_shards:05d}.safetensors"
        save_file(shard, os.path.join(args.out, name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
        shard, shard_bytes = {}, 0

    decodable = tokenizer_vocab_size(args.tokenizer)
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:  # std 0.02 like a trained model's scale: activations stay finite in bf16
            t = (torch.randn(shape, generator=gen, device=device) * 0.02).to(torch.bfloat16)
        if name == "lm_head.weight":
            # ids past the tokenizer's vocabulary get logit 0, below the best of the rest:
            # greedy decoding emits only ids the tokenizer turns into text, so streamed
            # chunks carry one token each and ITL means what it does with a real model
            t[decodable:] = 0
        shard[name] = t.cpu()
        shard_bytes += t.numel() * 2
        if shard_bytes >= SHARD_BYTES:
            flush()
    if shard:
        flush()
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": weight_map}, fh)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(args.tokenizer, name)):
            shutil.copy(os.path.join(args.tokenizer, name), args.out)
    print(f"wrote {len(shapes)} tensors in {num_shards} shards to {args.out}")


if __name__ == "__main__":
    main()
