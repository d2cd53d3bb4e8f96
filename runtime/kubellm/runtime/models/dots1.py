"""dots.llm1 (``Dots1ForCausalLM``): Qwen3 attention (per-head q/k RMSNorm) with the
DeepSeek-V3 router — sigmoid scores, a per-expert correction bias that steers the choice
but not the weights, the choice limited to the best ``topk_group`` of ``n_group``
expert groups, renormalized (``norm_topk_prob``) and scaled by ``routed_scaling_factor``,
in fp32 — plus ``n_shared_experts`` always-on experts (one MLP, no gate). The first
``first_k_dense_replace`` layers are dense."""
from __future__ import annotations

from dataclasses import fields

from kubellm.runtime.layers.moe_router import RouterSpec
from kubellm.runtime.models.llama import LlamaArgs
from kubellm.runtime.models.moe_base import MoeArgs, MoeForCausalLM, config_value


def dots1_args(cfg) -> MoeArgs:
    base = {f.name: getattr(LlamaArgs.from_hf(cfg), f.name) for f in fields(LlamaArgs)}
    base["qk_norm"] = True
    num_shared = config_value(cfg, "n_shared_experts", default=0)
    first_dense = config_value(cfg, "first_k_dense_replace", default=0)
    return MoeArgs(
        **base, num_experts=config_value(cfg, "n_routed_experts", "num_local_experts", default=0),
        moe_intermediate_size=cfg.moe_intermediate_size,
        router=RouterSpec(top_k=cfg.num_experts_per_tok, scoring="sigmoid",
                          renormalize=bool(cfg.norm_topk_prob),
                          num_groups=config_value(cfg, "n_group", default=1),
                          topk_groups=config_value(cfg, "topk_group", default=1),
                          routed_scaling_factor=float(cfg.routed_scaling_factor),
                          correction_bias=True, fp32=True),
        shared_intermediate_size=cfg.moe_intermediate_size * num_shared,
        dense_layers=frozenset(range(min(first_dense, cfg.num_hidden_layers))))


class Dots1ForCausalLM(MoeForCausalLM):
    def rename(self, name: str) -> str:
        return name.replace(".mlp.shared_experts.", ".mlp.shared_expert.")
