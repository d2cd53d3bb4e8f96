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


def attend(q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float, switches=None):
    """The backends' common entry: this one reads every key from the cache (where the
    step's own were just written), whatever the switches say."""
    return paged_attention(q, k_cache, v_cache, meta, scale)


def paged_attention(q, k_cache, v_cache, meta: AttentionMetadata, scale: float):
    """q: [T, Hq, D] -> [T, Hq, D]; query token i of a sequence with q_len new tokens and
    context seq_len sits at position seq_len - q_len + i and sees keys up to there.
    Decode rows (one query token) go through one padded batched SDPA; prefill chunks
    run one sequence at a time."""
    out = torch.empty_like(q)
    decode_rows, decode_seqs = [], []
    start = 0
    for b, (q_len, seq_len) in enumerate(zip(meta.query_lens_cpu, meta.seq_lens_cpu)):
        if q_len == 1:
            decode_rows.append(start)
            decode_seqs.append(b)
        else:
            out[start:start + q_len] = _one_sequence(q[start:start + q_len], k_cache, v_cache,
                                                     meta.block_tables[b], seq_len, scale)
        start += q_len
    if decode_rows:
        _decode_batch(q, out, k_cache, v_cache, meta, decode_rows, decode_seqs, scale)
    return out


def _one_sequence(q, k_cache, v_cache, block_table, seq_len, scale):
    q_len, num_heads = q.shape[0], q.shape[1]
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    blocks = block_table[:-(-seq_len // block_size)].long()
    k = k_cache[blocks].flatten(0, 1)[:seq_len].transpose(0, 1)     # [Hkv, S, D]
    v = v_cache[blocks].flatten(0, 1)[:seq_len].transpose(0, 1)
    group = num_heads // num_kv_heads
    k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
    o = F.scaled_dot_product_attention(q.transpose(0, 1), k, v,
                                       attn_mask=_causal_mask(q_len, seq_len, q.device),
                                       scale=scale)
    return o.transpose(0, 1)


def _decode_batch(q, out, k_cache, v_cache, meta, rows, seqs, scale):
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    num_heads = q.shape[1]
    seq_lens = [meta.seq_lens_cpu[b] for b in seqs]
    width = -(-max(seq_lens) // block_size)
    dev = q.device
    seq_idx = torch.tensor(seqs, device=dev)
    row_idx = torch.tensor(rows, device=dev)
    blocks = meta.block_tables[seq_idx, :width].long()                 # [B, nb]
    k = k_cache[blocks].flatten(1, 2).transpose(1, 2)                  # [B, Hkv, S, D]
    v = v_cache[blocks].flatten(1, 2).transpose(1, 2)
    group = num_heads // num_kv_heads
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    lens = torch.tensor(seq_lens, device=dev)
    mask = torch.arange(width * block_size, device=dev)[None, :] < lens[:, None]
    o = F.scaled_dot_product_attention(q[row_idx].unsqueeze(2), k, v,
                                       attn_mask=mask[:, None, None, :], scale=scale)
    out[row_idx] = o.squeeze(2)


def _causal_mask(q_len: int, seq_len: int, device) -> torch.Tensor | None:
    if q_len == 1:
        return None
    q_pos = torch.arange(seq_len - q_len, seq_len, device=device).unsqueeze(1)
    k_pos = torch.arange(seq_len, device=device).unsqueeze(0)
    return k_pos <= q_pos
