"""Real model shapes for GPU tests and benchmarks, written as config-only checkpoints
(random weights: no weights can be downloaded on the GPU machine)."""
from __future__ import annotations

import json
from pathlib import Path

LLAMA3_8B = dict(
    architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256,
    hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
    rope_theta=500000.0, tie_word_embeddings=False, bos_token_id=128000,
    eos_token_id=128001, torch_dtype="bfloat16",
    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})

QWEN3_8B = dict(
    architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
    hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
    rope_theta=1000000.0, tie_word_embeddings=False, bos_token_id=151643,
    eos_token_id=151645, torch_dtype="bfloat16")


# the Llama-3-8B shape shrunk for a script's --smoke run on the CPU (same code paths)
SMOKE_LLAMA = dict(vocab_size=2048, hidden_size=128, intermediate_size=256,
                   num_attention_heads=4, num_key_value_heads=2, bos_token_id=1,
                   eos_token_id=2)


def write_config(shape: dict, out: Path, **overrides) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({**shape, **overrides}, indent=1))
    return str(out)

# a small real shape, where the host's work per step is a large share of a step
QWEN25_05B = dict(
    architectures=["Qwen2ForCausalLM"], model_type="qwen2", vocab_size=151936,
    hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
    rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
    bos_token_id=151643, eos_token_id=151645, torch_dtype="bfloat16")

# 30.5B parameters, 3.3B active: 128 experts of 768, top-8 renormalized, no shared expert
QWEN3_30B_A3B = dict(
    architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", vocab_size=151936,
    hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
    num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
    num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
    mlp_only_layers=[], max_position_embeddings=40960, rms_norm_eps=1e-6,
    rope_theta=1000000.0, tie_word_embeddings=False, use_sliding_window=False,
    sliding_window=None, bos_token_id=151643, eos_token_id=151645, torch_dtype="bfloat16")

SHAPES = {"llama3-8b": LLAMA3_8B, "qwen3-8b": QWEN3_8B, "qwen2.5-0.5b": QWEN25_05B}

# Mixtral-8x7B: 8 experts, top-2 (the GPU MoE test and the CPU bf16 noise measurement)
MIXTRAL_8X7B = dict(
    architectures=["MixtralForCausalLM"], model_type="mixtral", vocab_size=32000,
    hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
    max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=1000000.0,
    sliding_window=None, tie_word_embeddings=False, torch_dtype="bfloat16")
