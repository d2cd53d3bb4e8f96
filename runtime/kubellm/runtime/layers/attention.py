"""The attention layer: writes this step's K/V into its slice of the paged cache and
attends through the selected backend. The model runner binds ``k_cache``/``v_cache``."""
from __future__ import annotations

import torch
from torch import nn

from kubellm.runtime.attention.metadata import get_metadata


class Attention(nn.Module):
    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = scale
        self.k_cache: torch.Tensor | None = None   # [num_blocks, block_size, Hkv, D]
        self.v_cache: torch.Tensor | None = None
        self.backend = None                         # set by the model runner

    def forward(self, q, k, v):
        """q: [T, Hq, D]; k, v: [T, Hkv, D] -> [T, Hq, D]."""
        meta = get_metadata()
        self.backend.write_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        return self.backend.paged_attention(q, self.k_cache, self.v_cache, meta, self.scale)
