"""Online quantization: group-wise round-to-nearest of a float weight to ``bits``-bit codes.

Asymmetric by default: each group of ``group_size`` input features keeps a float minimum
as its bias and (max - min) / (2**bits - 1) as its scale, so the codes span the group's
range (no zero point rounded to an integer). Symmetric (GPTQ's sym): scale = 2 * absmax /
(2**bits - 1) around code 2**(bits-1), bias = -2**(bits-1) * scale. The perplexity of both
is measured by benchmarks/cpu/quantization_quality.py (README): asymmetric loses less.

``clip_search`` also tries ranges shrunk toward zero (the outermost weights clipped) and
keeps, per group, the one with the least squared error: a few outliers otherwise
stretch the step of the whole group (the clipping search of AWQ and llama.cpp).
"""
from __future__ import annotations

import torch

from kubellm.runtime.layers.quantization.packed import QuantizedWeight

CLIP_FACTORS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75)


def _grid(w: torch.Tensor, low, high, top: int, symmetric: bool):
    """(scales, biases) of ranges [low, high] per group (w: [groups, size, out])."""
    if symmetric:
        scales = 2 * torch.maximum(high, -low) / top
        return scales, -(top // 2 + 1) * scales
    return (high - low) / top, low


def _codes(w, scales, biases, top):
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    return torch.round((w - biases.unsqueeze(1)) / safe.unsqueeze(1)).clamp_(0, top)


@torch.no_grad()
def quantize_rtn(weight: torch.Tensor, bits: int = 4, group_size: int = 128,
                 symmetric: bool = False, clip_search: bool = False) -> QuantizedWeight:
    """weight: float [out, in] (nn.Linear layout), in % group_size == 0."""
    out_features, in_features = weight.shape
    if in_features % group_size:
        raise ValueError(f"in_features={in_features} is not a multiple of the "
                         f"quantization group size {group_size}")
    w = weight.float().t().reshape(in_features // group_size, group_size, out_features)
    top = 2 ** bits - 1
    low, high = w.amin(1), w.amax(1)
    scales, biases = _grid(w, low, high, top, symmetric)
    if clip_search:
        best = None
        for factor in CLIP_FACTORS:
            s, b = _grid(w, low * factor, high * factor, top, symmetric)
            err = (_codes(w, s, b, top) * s.unsqueeze(1) + b.unsqueeze(1) - w).square().sum(1)
            if best is None:
                best = err
                continue
            better = err < best
            best = torch.where(better, err, best)
            scales, biases = torch.where(better, s, scales), torch.where(better, b, biases)
    codes = _codes(w, scales, biases, top)
    return QuantizedWeight(codes.reshape(in_features, out_features).to(torch.uint8),
                           scales, biases, bits, group_size)
