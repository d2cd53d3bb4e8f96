"""Mixtral (``MixtralForCausalLM``): Mistral attention; every layer's MLP is a sparse block
of ``num_local_experts`` experts, top-``num_experts_per_tok`` of a softmax over all of
them, renormalized. Checkpoints name the block ``block_sparse_moe`` and an expert's
projections ``w1`` (gate), ``w3`` (up), ``w2`` (down)."""
from __future__ import annotations

from dataclasses import fields

from kubellm.runtime.layers.moe_router import RouterSpec
from kubellm.runtime.models.llama import LlamaArgs
from kubellm.runtime.models.moe_base import MoeArgs, MoeForCausalLM, config_value


def mixtral_args(cfg) -> MoeArgs:
    base = LlamaArgs.from_hf(cfg)
    return MoeArgs(
        **{f.name: getattr(base, f.name) for f in fields(LlamaArgs)},
        num_experts=config_value(cfg, "num_local_experts", "num_experts", default=0),
        moe_intermediate_size=cfg.intermediate_size,
        router=RouterSpec(top_k=cfg.num_experts_per_tok, scoring="softmax", renormalize=True),
        expert_names=("w1", "w3", "w2"))


class MixtralForCausalLM(MoeForCausalLM):
    def rename(self, name: str) -> str:
        return name.replace(".block_sparse_moe.", ".mlp.")
