"""Rotary position embedding (rotate-half layout, as Llama checkpoints expect), with the
``llama3`` frequency scaling of Llama 3.1+ and the ``linear`` / ``default`` kinds."""
from __future__ import annotations

import json
import weakref

import torch
from torch import nn

from kubellm.kernels.rope_cache import build_cos_sin_cache

# One table per (shape, base, scaling, device), shared by every layer that uses it: a
# table per layer cost Llama 3 (131,072 positions x 128 x fp32 = 64 MiB) 2 GiB of GPU
# memory over 32 layers, taken from the KV cache. Freed with the last layer holding it.
_TABLES: "weakref.WeakValueDictionary[tuple, torch.Tensor]" = weakref.WeakValueDictionary()


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_position: int, base: float, scaling: dict | None):
        super().__init__()
        self.head_dim, self.max_position = head_dim, max_position
        self.base, self.scaling = base, scaling
        # built on first use on the inputs' device (the model is created on ``meta``)
        self.cos_sin_cache: torch.Tensor | None = None

    def build_cache(self, device) -> torch.Tensor:
        """[max_position, head_dim] fp32: cos in the first half, sin in the second."""
        return build_cos_sin_cache(self.head_dim, self.max_position, self.base, self.scaling,
                                   device=device)

    def table(self, device) -> torch.Tensor:
        """The cos/sin table on ``device`` (built there on first use, shared with the
        other layers of the same rotary parameters)."""
        if self.cos_sin_cache is None or self.cos_sin_cache.device != device:
            key = (self.head_dim, self.max_position, self.base,
                   json.dumps(self.scaling, sort_keys=True, default=str), str(device))
            table = _TABLES.get(key)
            if table is None:
                table = _TABLES[key] = self.build_cache(device)
            self.cos_sin_cache = table
        return self.cos_sin_cache

    def forward(self, positions, q, k):
        """q: [T, Hq, D], k: [T, Hkv, D] -> rotated (new tensors)."""
        self.table(positions.device)
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
