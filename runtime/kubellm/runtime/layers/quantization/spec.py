"""Which linear layers are quantized, and how: a ``LinearQuantSpec`` per layer (by its name
in our model), applied to the model built on ``meta`` before its parameters exist."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kubellm.runtime.layers.linear import ColumnParallelLinear, RowParallelLinear


@dataclass(frozen=True)
class LinearQuantSpec:
    bits: int = 4
    group_size: int = 128
    has_g_idx: bool = False
    symmetric: bool = False     # online quantization only: how float weights are rounded

    def merged_with(self, other: "LinearQuantSpec") -> "LinearQuantSpec":
        """One spec for a fused layer whose parts differ (GGUF Q4_K q/k next to a Q6_K v):
        the wider codes and the common divisor of the group sizes hold both exactly."""
        if self.has_g_idx != other.has_g_idx:
            raise ValueError("parts of one fused layer mix act-order (g_idx) and plain groups")
        return LinearQuantSpec(max(self.bits, other.bits),
                               math.gcd(self.group_size, other.group_size), self.has_g_idx,
                               self.symmetric)


def is_parallel_linear(module: torch.nn.Module) -> bool:
    return isinstance(module, (ColumnParallelLinear, RowParallelLinear))


def apply_quantization(model: torch.nn.Module, specs: dict[str, LinearQuantSpec]) -> int:
    """Give each named linear its quantized parameters (on the model's device, normally
    ``meta``); returns how many layers were converted. Unknown names are an error."""
    from kubellm.runtime.layers.quantization.linear_method import QuantizedLinearMethod
    modules = dict(model.named_modules())
    for name, spec in specs.items():
        layer = modules.get(name)
        if layer is None or not is_parallel_linear(layer):
            raise ValueError(f"quantization names {name!r}, which is not a linear layer of "
                             f"{type(model).__name__}")
        QuantizedLinearMethod(spec).create_weights(layer, name)
    return len(specs)


def online_specs(model: torch.nn.Module, bits: int, group_size: int,
                 symmetric: bool = False) -> dict[str, LinearQuantSpec]:
    """Every parallel linear (embeddings and the LM head are not linears here)."""
    spec = LinearQuantSpec(bits, group_size, False, symmetric)
    return {name: spec for name, m in model.named_modules() if is_parallel_linear(m)}
