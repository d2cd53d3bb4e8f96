"""Gated activation of the Llama MLP."""
import torch
from torch import nn


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return nn.functional.silu(gate) * up
