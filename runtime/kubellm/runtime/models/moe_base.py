"""What the mixture-of-experts families share: Llama-family attention and norms, with a
sparse block (router + experts + optional shared expert) in place of the dense MLP on
every layer but the dense ones the config names.

Families differ in the router (``RouterSpec``), the shared expert, which layers stay
dense, and checkpoint names; each family file fills ``MoeArgs`` from its config.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from torch import nn

from kubellm.runtime.layers.moe import SparseMoeBlock
from kubellm.runtime.layers.moe_router import RouterSpec
from kubellm.runtime.models.llama import LlamaArgs, LlamaDecoderLayer, LlamaForCausalLM

# transformers' per-expert (hub) names and its in-memory stacked ones
_PER_EXPERT = re.compile(r"^layers\.(\d+)\.mlp\.experts\.(\d+)\.(\w+)\.weight$")
_STACKED = re.compile(r"^layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")


def config_value(cfg, *names, default=None):
    """The first of ``names`` the config has (transformers renamed a few over time)."""
    for name in names:
        value = getattr(cfg, name, None)
        if value is not None:
            return value
    return default


@dataclass
class MoeArgs(LlamaArgs):
    num_experts: int = 0
    moe_intermediate_size: int = 0
    router: RouterSpec = field(default_factory=lambda: RouterSpec(top_k=1))
    shared_intermediate_size: int = 0   # 0: no shared expert
    shared_expert_gate: bool = False    # sigmoid(x . w) scales the shared expert (Qwen2)
    dense_layers: frozenset = frozenset()
    # checkpoint names of an expert's gate, up and down projections
    expert_names: tuple = ("gate_proj", "up_proj", "down_proj")

    def validate(self) -> None:
        if self.num_experts < 1:
            raise ValueError(f"num_experts must be positive, got {self.num_experts}")
        if self.moe_intermediate_size < 1:
            raise ValueError("moe_intermediate_size must be positive, got "
                             f"{self.moe_intermediate_size}")
        self.router.validate(self.num_experts)


class MoeForCausalLM(LlamaForCausalLM):
    def __init__(self, a: MoeArgs, layer_range: tuple[int, int] | None = None):
        a.validate()
        super().__init__(a, layer_range)

    def build_layer(self, a: MoeArgs, index: int) -> nn.Module:
        if index in a.dense_layers:
            return LlamaDecoderLayer(a)
        return LlamaDecoderLayer(a, SparseMoeBlock(
            a.hidden_size, a.num_experts, a.moe_intermediate_size, a.router,
            a.shared_intermediate_size, a.shared_expert_gate))

    def rename(self, name: str) -> str:
        """A family's checkpoint name -> the common one (``model.`` prefix removed)."""
        return name

    def checkpoint_to_param(self, name: str) -> tuple[str, object] | None:
        name = self.rename(name.removeprefix("model."))
        one = _PER_EXPERT.match(name)
        stacked = _STACKED.match(name)
        if one is None and stacked is None:
            return super().checkpoint_to_param(name)
        layer = int((one or stacked)[1])
        if not self.start_layer <= layer < self.end_layer:
            return None
        prefix = f"layers.{layer}.mlp.experts"
        if stacked is not None:
            which = stacked[2]
            param = "w13_weight" if which == "gate_up_proj" else "w2_weight"
            return f"{prefix}.{param}", ("all", "gate_up" if param == "w13_weight" else "down")
        names = self.args.expert_names
        if one[3] not in names:
            raise ValueError(f"checkpoint tensor {name!r}: an expert has no projection "
                             f"{one[3]!r} (expected {', '.join(names)})")
        part = ("gate", "up", "down")[names.index(one[3])]
        return f"{prefix}.{'w2_weight' if part == 'down' else 'w13_weight'}", (int(one[2]), part)
