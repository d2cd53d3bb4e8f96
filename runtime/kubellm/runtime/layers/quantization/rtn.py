"""Online quantization: group-wise round-to-nearest of a float weight to ``bits``-bit codes.

Asymmetric by default: each group of ``group_size`` input features keeps its minimum as a
float bias and (max - min) / (2**bits - 1) as its scale, so the codes span the group's
whole range (no zero point rounded to an integer). Symmetric (GPTQ's sym): scale =
2 * absmax / (2**bits - 1) around code 2**(bits-1), bias = -2**(bits-1) * scale. The perplexity of both is measured
by benchmarks/cpu/quantization_quality.py (README): asymmetric loses less, so it is the
default.
"""
from __future__ import annotations

import torch

from kubellm.runtime.layers.quantization.packed import QuantizedWeight


@torch.no_grad()
def quantize_rtn(weight: torch.Tensor, bits: int = 4, group_size: int = 128,
                 symmetric: bool = False) -> QuantizedWeight:
    """weight: float [out, in] (nn.Linear layout), in % group_size == 0."""
    out_features, in_features = weight.shape
    if in_features % group_size:
        raise ValueError(f"in_features={in_features} is not a multiple of the "
                         f"quantization group size {group_size}")
    w = weight.float().t().reshape(in_features // group_size, group_size, out_features)
    top = 2 ** bits - 1
    if symmetric:
        half = 2 ** (bits - 1)
        scales = 2 * w.abs().amax(1) / top
        biases = -half * scales
    else:
        low, high = w.amin(1), w.amax(1)
        scales = (high - low) / top
        biases = low
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    codes = torch.round((w - biases.unsqueeze(1)) / safe.unsqueeze(1)).clamp_(0, top)
    return QuantizedWeight(codes.reshape(in_features, out_features).to(torch.uint8),
                           scales, biases, bits, group_size)
