"""The attention layer: writes this step's K/V into its slice of the paged cache and
attends through the selected backend. The model runner binds ``k_cache``/``v_cache``,
the backend and its ``KernelSwitches``.

Given the rotary embedding and the step's positions, the layer also rotates q and k
itself: then a backend that can (``rotary_write_kv``) does the rotation and the cache
write in one kernel when the ``rope_kv_write`` switch is on."""
from __future__ import annotations

from torch import nn

from kubellm.runtime.attention.metadata import get_metadata
from kubellm.runtime.kernel_switches import KernelSwitches


class Attention(nn.Module):
    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = scale
        self.k_cache = None   # [num_blocks, block_size, Hkv, D]
        self.v_cache = None
        self.backend = None                         # set by the model runner
        self.switches = KernelSwitches()            # replaced by the model runner's

    def forward(self, q, k, v, positions=None, rotary=None):
        """q: [T, Hq, D]; k, v: [T, Hkv, D] -> [T, Hq, D]; with ``rotary`` (a
        RotaryEmbedding) q and k are rotated at ``positions`` first."""
        meta = get_metadata()
        backend, switches = self.backend, self.switches
        if rotary is not None and switches.rope_kv_write and hasattr(backend, "rotary_write_kv"):
            # the prefill kernel reads the step's keys: only then are they materialised
            wants_keys = backend.uses_prefill_kernel(meta, switches,
                                                     self.num_heads // self.num_kv_heads)
            q, k = backend.rotary_write_kv(positions, q, k, v, self.k_cache, self.v_cache,
                                           meta.slot_mapping, rotary.table(positions.device),
                                           return_key=wants_keys)
        else:
            if rotary is not None:
                q, k = rotary(positions, q, k)
            backend.write_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        return backend.attend(q, k, v, self.k_cache, self.v_cache, meta, self.scale, switches)
