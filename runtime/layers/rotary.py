"""Rotary position embedding (rotate-half layout, as Llama checkpoints expect), with the
``llama3`` frequency scaling of Llama 3.1+ and the ``linear`` / ``default`` kinds."""
from __future__ import annotations

import math

import torch
from torch import nn


def rope_inverse_frequencies(head_dim: int, base: float, scaling: dict | None) -> torch.Tensor:
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        return _llama3_scaled(inv_freq, scaling)
    raise ValueError(f"rope_scaling type {kind!r} is not supported")


def _llama3_scaled(inv_freq: torch.Tensor, s: dict) -> torch.Tensor:
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    # long wavelengths are slowed by ``factor``, short ones kept, the middle interpolated
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_position: int, base: float, scaling: dict | None):
        super().__init__()
        self.head_dim, self.max_position = head_dim, max_position
        self.base, self.scaling = base, scaling
        # built on first use on the inputs' device (the model is created on ``meta``)
        self.cos_sin_cache: torch.Tensor | None = None

    def build_cache(self, device) -> torch.Tensor:
        """[max_position, head_dim] fp32: cos in the first half, sin in the second."""
        inv_freq = rope_inverse_frequencies(self.head_dim, self.base, self.scaling)
        freqs = torch.outer(torch.arange(self.max_position, dtype=torch.float32), inv_freq)
        return torch.cat([freqs.cos(), freqs.sin()], -1).to(device)

    def forward(self, positions, q, k):
        """q: [T, Hq, D], k: [T, Hkv, D] -> rotated (new tensors)."""
        if self.cos_sin_cache is None or self.cos_sin_cache.device != positions.device:
            self.cos_sin_cache = self.build_cache(positions.device)
        if q.is_cuda:
            from kubellm.kernels.rotary import apply_rotary
            return apply_rotary(positions, q, k, self.cos_sin_cache)
        cos, sin = self.cos_sin_cache[positions].chunk(2, dim=-1)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return _rotate(q, cos, sin), _rotate(k, cos, sin)


def _rotate(x, cos, sin):
    dtype = x.dtype
    x = x.float()
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(dtype)
