"""How a linear layer is quantized: a ``LinearQuantSpec`` per layer (by its name in our
model); ``apply`` gives the layers of a model built on ``meta`` their packed parameters."""
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
