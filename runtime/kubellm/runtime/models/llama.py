"""The Llama family: Llama 2/3 (llama3 RoPE scaling), Mistral, Qwen2 (QKV bias) and
Qwen3 (per-head q/k RMSNorm), tied or untied embeddings.

Inputs are flat: all tokens of the step in one [T] vector with their positions; the
attention layer finds sequence boundaries in the step's AttentionMetadata. Nothing here
knows about tensor parallelism beyond using the parallel layers.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from kubellm.runtime.layers.activation import SiluAndMul
from kubellm.runtime.layers.attention import Attention
from kubellm.runtime.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from kubellm.runtime.layers.linear import (MergedColumnParallelLinear, QKVParallelLinear,
                                           RowParallelLinear)
from kubellm.runtime.layers.norm import RMSNorm
from kubellm.runtime.layers.rotary import RotaryEmbedding


@dataclass
class LlamaArgs:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position: int
    tie_word_embeddings: bool
    qkv_bias: bool = False
    qk_norm: bool = False

    @classmethod
    def from_hf(cls, cfg) -> "LlamaArgs":
        model_type = getattr(cfg, "model_type", "llama")
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        rope = getattr(cfg, "rope_scaling", None) or getattr(cfg, "rope_parameters", None)
        theta = getattr(cfg, "rope_theta", None)
        if theta is None and isinstance(rope, dict):
            theta = rope.get("rope_theta")
        return cls(
            vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
            intermediate_size=cfg.intermediate_size, num_layers=cfg.num_hidden_layers,
            num_heads=cfg.num_attention_heads,
            num_kv_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
            head_dim=head_dim, rms_norm_eps=cfg.rms_norm_eps,
            rope_theta=float(theta if theta is not None else 10000.0),
            rope_scaling=rope if isinstance(rope, dict) else None,
            max_position=cfg.max_position_embeddings,
            tie_word_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2" or bool(getattr(cfg, "attention_bias", False)),
            qk_norm=model_type == "qwen3",
        )


class LlamaAttention(nn.Module):
    def __init__(self, a: LlamaArgs):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(a.hidden_size, a.head_dim, a.num_heads,
                                          a.num_kv_heads, bias=a.qkv_bias)
        self.num_heads = self.qkv_proj.num_heads
        self.num_kv_heads = self.qkv_proj.num_kv_heads
        self.head_dim = a.head_dim
        self.o_proj = RowParallelLinear(a.num_heads * a.head_dim, a.hidden_size)
        self.q_norm = RMSNorm(a.head_dim, a.rms_norm_eps) if a.qk_norm else None
        self.k_norm = RMSNorm(a.head_dim, a.rms_norm_eps) if a.qk_norm else None
        self.rotary = RotaryEmbedding(a.head_dim, a.max_position, a.rope_theta, a.rope_scaling)
        self.attn = Attention(self.num_heads, self.num_kv_heads, a.head_dim,
                              a.head_dim ** -0.5)

    def forward(self, positions, x):
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rotary(positions, q, k)
        o = self.attn(q, k, v)
        return self.o_proj(o.flatten(1))


class LlamaMLP(nn.Module):
    def __init__(self, a: LlamaArgs):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(a.hidden_size, [a.intermediate_size] * 2)
        self.down_proj = RowParallelLinear(a.intermediate_size, a.hidden_size)
        self.act = SiluAndMul()

    def forward(self, x):
        return self.down_proj(self.act(self.gate_up_proj(x)))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, a: LlamaArgs):
        super().__init__()
        self.self_attn = LlamaAttention(a)
        self.mlp = LlamaMLP(a)
        self.input_layernorm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(a.hidden_size, a.rms_norm_eps)

    def forward(self, positions, x, residual):
        if residual is None:
            residual = x
            x = self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.self_attn(positions, x)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


class LlamaForCausalLM(nn.Module):
    """``layer_range`` keeps only a pipeline stage's layers (others are not built)."""

    # checkpoint name fragment -> (our fused parameter fragment, shard id)
    packed = {
        "q_proj": ("qkv_proj", "q"), "k_proj": ("qkv_proj", "k"), "v_proj": ("qkv_proj", "v"),
        "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
    }

    def __init__(self, a: LlamaArgs, layer_range: tuple[int, int] | None = None):
        super().__init__()
        self.args = a
        self.start_layer, self.end_layer = layer_range or (0, a.num_layers)
        self.is_first_stage = self.start_layer == 0
        self.is_last_stage = self.end_layer == a.num_layers
        self.embed_tokens = VocabParallelEmbedding(a.vocab_size, a.hidden_size) \
            if self.is_first_stage or (self.is_last_stage and a.tie_word_embeddings) else None
        self.layers = nn.ModuleDict({str(i): LlamaDecoderLayer(a)
                                     for i in range(self.start_layer, self.end_layer)})
        self.norm = RMSNorm(a.hidden_size, a.rms_norm_eps) if self.is_last_stage else None
        self.lm_head = None
        if self.is_last_stage and not a.tie_word_embeddings:
            self.lm_head = ParallelLMHead(a.vocab_size, a.hidden_size)

    def forward(self, token_ids, positions, hidden=None, residual=None):
        """First stage: from token ids; later stages: from the previous stage's
        (hidden, residual). Returns (hidden, residual); the last stage's hidden is
        final-normed."""
        if self.is_first_stage:
            hidden = self.embed_tokens(token_ids)
        for layer in self.layers.values():
            hidden, residual = layer(positions, hidden, residual)
        if self.is_last_stage:
            hidden, _ = self.norm(hidden, residual)
        return hidden, residual

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        head = self.lm_head if self.lm_head is not None else self.embed_tokens
        logits = nn.functional.linear(hidden, head.weight)
        logits = head.gather_logits(logits)
        return logits[..., :self.args.vocab_size]

    def checkpoint_to_param(self, name: str) -> tuple[str, object] | None:
        """Map a Hugging Face tensor name to (our parameter name, shard id), or None when
        this model (stage) has no such parameter."""
        name = name.removeprefix("model.")
        if name.startswith("layers."):
            idx = int(name.split(".")[1])
            if not self.start_layer <= idx < self.end_layer:
                return None
        # a pipeline stage holds the embedding, final norm and head only where it uses them
        if name == "lm_head.weight" and self.lm_head is None:
            return None
        if name.startswith("embed_tokens.") and self.embed_tokens is None:
            return None
        if name.startswith("norm.") and self.norm is None:
            return None
        if "rotary_emb" in name:
            return None
        for src, (dst, shard) in self.packed.items():
            if f".{src}." in name:
                return name.replace(src, dst), shard
        return name, None
