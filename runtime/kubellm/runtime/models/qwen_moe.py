"""Qwen2-MoE (``Qwen2MoeForCausalLM``: QKV bias, a shared expert scaled by a sigmoid
gate) and Qwen3-MoE (``Qwen3MoeForCausalLM``: per-head q/k RMSNorm, no shared expert).
Router: softmax over all experts, top-k, renormalized only with ``norm_topk_prob``, the
weights rounded to the model dtype. Layers in ``mlp_only_layers``, or off the
``decoder_sparse_step`` stride, keep a dense MLP of ``intermediate_size``."""
from __future__ import annotations

from dataclasses import fields

from kubellm.runtime.layers.moe_router import RouterSpec
from kubellm.runtime.models.llama import LlamaArgs
from kubellm.runtime.models.moe_base import MoeArgs, MoeForCausalLM, config_value


def qwen_moe_args(cfg) -> MoeArgs:
    base = {f.name: getattr(LlamaArgs.from_hf(cfg), f.name) for f in fields(LlamaArgs)}
    is_qwen2 = cfg.model_type == "qwen2_moe"
    if is_qwen2:
        base["qkv_bias"] = bool(config_value(cfg, "qkv_bias", default=True))
    else:
        base["qk_norm"] = True
    num_experts = config_value(cfg, "num_experts", "num_local_experts", default=0)
    step = config_value(cfg, "decoder_sparse_step", default=1)
    only_mlp = set(config_value(cfg, "mlp_only_layers", default=[]))
    dense = frozenset(i for i in range(cfg.num_hidden_layers)
                      if i in only_mlp or num_experts == 0 or (i + 1) % step)
    shared = config_value(cfg, "shared_expert_intermediate_size", default=0) if is_qwen2 else 0
    return MoeArgs(
        **base, num_experts=num_experts, moe_intermediate_size=cfg.moe_intermediate_size,
        router=RouterSpec(top_k=cfg.num_experts_per_tok, scoring="softmax",
                          renormalize=bool(cfg.norm_topk_prob), round_weights=True),
        shared_intermediate_size=shared, shared_expert_gate=bool(shared), dense_layers=dense)


class QwenMoeForCausalLM(MoeForCausalLM):
    pass
