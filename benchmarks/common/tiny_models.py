"""Tiny random checkpoints of each supported family, saved like real ones.

Weights are drawn with a large init scale so logits are spread out: greedy decoding then
has no near-ties, and comparisons with transformers test the arithmetic, not luck.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

COMMON = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
              rms_norm_eps=1e-5, initializer_range=0.2, bos_token_id=1, eos_token_id=2)

FAMILIES = {
    # family: (config class name, overrides)
    "llama": ("LlamaConfig", dict(tie_word_embeddings=False)),
    "llama3": ("LlamaConfig", dict(tie_word_embeddings=False, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "mistral": ("MistralConfig", dict(tie_word_embeddings=False, sliding_window=None)),
    "qwen2": ("Qwen2Config", dict(tie_word_embeddings=True, use_sliding_window=False)),
    "qwen3": ("Qwen3Config", dict(tie_word_embeddings=True, head_dim=32,
                                  use_sliding_window=False)),
    # enough layers to split unevenly across pipeline stages
    "llama-4layers": ("LlamaConfig", dict(tie_word_embeddings=False, num_hidden_layers=4)),
    # mixture-of-experts: each router kind, top-2 to top-8, shared experts, dense layers
    "mixtral": ("MixtralConfig", dict(tie_word_embeddings=False, sliding_window=None,
                                      num_local_experts=8, num_experts_per_tok=2)),
    "qwen2-moe": ("Qwen2MoeConfig", dict(
        tie_word_embeddings=True, use_sliding_window=False, num_experts=8,
        num_experts_per_tok=4, moe_intermediate_size=32, shared_expert_intermediate_size=64,
        norm_topk_prob=False, num_hidden_layers=3, mlp_only_layers=[1])),
    "qwen3-moe": ("Qwen3MoeConfig", dict(
        tie_word_embeddings=False, head_dim=32, use_sliding_window=False, num_experts=16,
        num_experts_per_tok=8, moe_intermediate_size=32, norm_topk_prob=True)),
    "dots1": ("Dots1Config", dict(
        tie_word_embeddings=False, sliding_window=None, n_routed_experts=8,
        n_shared_experts=1, num_experts_per_tok=2, n_group=4, topk_group=2,
        norm_topk_prob=True, routed_scaling_factor=2.5, first_k_dense_replace=1,
        moe_intermediate_size=32, num_hidden_layers=3)),
}


def write_tiny_model(family: str, out: Path, tokenizer_dir: str) -> str:
    import transformers
    cls_name, overrides = FAMILIES[family]
    config = getattr(transformers, cls_name)(**{**COMMON, **overrides})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():   # routers' correction biases start at 0: give them some say
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.copy_(torch.randn(buffer.shape) * 0.1)
    model.save_pretrained(out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        src = Path(tokenizer_dir) / name
        if src.exists():
            shutil.copy(src, out / name)
    return str(out)
