"""Reference attention backend in plain torch: scatter the new K/V into the paged cache,
then, per sequence, gather its blocks and run causal SDPA. Correct anywhere, fast
nowhere; the Triton backend replaces it on CUDA."""
from __future__ import annotations

import torch
from torch.nn import functional as F

from kubellm.runtime.attention.metadata import AttentionMetadata


def write_kv(k, v, k_cache, v_cache, slot_mapping):
    """k, v: [T, Hkv, D]; caches: [num_blocks, block_size, Hkv, D]."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k[keep])
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v[keep])


def paged_attention(q, k_cache, v_cache, meta: AttentionMetadata, scale: float):
    """q: [T, Hq, D] -> [T, Hq, D]; query token i of a sequence with q_len new tokens and
    context seq_len sits at position seq_len - q_len + i and sees keys up to there."""
    out = torch.empty_like(q)
    block_size = k_cache.shape[1]
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    start = 0
    for b, (q_len, seq_len) in enumerate(zip(meta.query_lens_cpu, meta.seq_lens_cpu)):
        num_blocks = -(-seq_len // block_size)
        blocks = meta.block_tables[b, :num_blocks].long()
        k = k_cache[blocks].flatten(0, 1)[:seq_len]          # [S, Hkv, D]
        v = v_cache[blocks].flatten(0, 1)[:seq_len]
        qb = q[start:start + q_len].transpose(0, 1)          # [Hq, Q, D]
        k = k.transpose(0, 1).repeat_interleave(num_heads // num_kv_heads, dim=0)
        v = v.transpose(0, 1).repeat_interleave(num_heads // num_kv_heads, dim=0)
        mask = _causal_mask(q_len, seq_len, q.device)
        o = F.scaled_dot_product_attention(qb, k, v, attn_mask=mask, scale=scale)
        out[start:start + q_len] = o.transpose(0, 1)
        start += q_len
    return out


def _causal_mask(q_len: int, seq_len: int, device) -> torch.Tensor | None:
    if q_len == 1:
        return None
    q_pos = torch.arange(seq_len - q_len, seq_len, device=device).unsqueeze(1)
    k_pos = torch.arange(seq_len, device=device).unsqueeze(0)
    return k_pos <= q_pos
