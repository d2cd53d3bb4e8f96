"""Attention backend on the Triton kernels (kernels/): same interface as torch_backend,
but it reads only device tensors, so a decode step can be captured in a CUDA graph."""
from __future__ import annotations

from kubellm.kernels.paged_attention import paged_attention as _paged_attention
from kubellm.kernels.reshape_and_cache import write_kv_cache
from kubellm.runtime.attention.metadata import AttentionMetadata


def write_kv(k, v, k_cache, v_cache, slot_mapping):
    write_kv_cache(k, v, k_cache, v_cache, slot_mapping)


def paged_attention(q, k_cache, v_cache, meta: AttentionMetadata, scale: float):
    return _paged_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                            meta.cu_seqlens_q, meta.max_seqlen_q, scale)
