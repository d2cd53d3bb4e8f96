"""Attention backend on the Triton kernels (kernels/): same interface as torch_backend,
but it reads only device tensors, so a decode step can be captured in a CUDA graph.

Steps with long prefills, or with more new tokens than a mixed-step graph holds, take the
prefill kernel when the ``prefill_attention`` switch is on (kernel_switches.py;
``uses_prefill_kernel``): the step's decodes (the first ``meta.num_decodes`` sequences)
through the paged kernel's decode tiles, the rest with their own keys read from the
projection output. Otherwise the paged kernel serves the whole step.
"""
from __future__ import annotations

import torch

from kubellm.kernels.paged_attention import paged_attention as _paged_attention
from kubellm.kernels.prefill_attention import prefill_attention as _prefill_attention
from kubellm.kernels.reshape_and_cache import write_kv_cache
from kubellm.kernels.rotary_kv_write import rotary_kv_write
from kubellm.runtime.attention.metadata import AttentionMetadata
from kubellm.runtime.kernel_switches import KernelSwitches


def write_kv(k, v, k_cache, v_cache, slot_mapping):
    write_kv_cache(k, v, k_cache, v_cache, slot_mapping)


def rotary_write_kv(positions, q, k, v, k_cache, v_cache, slot_mapping, cos_sin_cache,
                    return_key: bool = False):
    """Rotate q and k and write k, v into the cache in one kernel -> (q_rot, k_rot or
    None); k_rot is materialised only with ``return_key``."""
    out = rotary_kv_write(positions, q, k, v, k_cache, v_cache, slot_mapping, cos_sin_cache,
                          return_key=return_key)
    return out if return_key else (out, None)


# Steps whose longest new chunk is shorter attend with the paged kernel alone. On the
# H200 a 512-token prompt joining 20 decodes of an 8B model is an eager step that waits
# on the host's ~390 launches: the prefill kernel's extra launch and tensor descriptors
# per layer made it 10 ms longer (45.6 against 35.4 ms; 2026-12-02 call 13) to save well
# under 1 ms of attention. From the kernel's long-prompt tuning bucket on, such steps are
# bound by the device, where the kernel beats the paged one by 1.06-1.28x.
PREFILL_KERNEL_MIN_QUERY = 2048
# Steps of more new tokens than this take it whatever their chunks' lengths. They run
# eagerly (no mixed-step graph holds more than worker/mixed_graphs.MAX_TOKENS, 2,048) and
# the device is busy: a chat step of 8,192 tokens (12 prompts of 700 beside 160 decodes)
# took 191 ms of device time on the H200; the paged kernel, whose 128-row prefill tiles
# also carried the decodes (4 rows of 128 used), took 31.9 ms over it and the smaller
# mixed step after it (s19 call 64,
# benchmarks/gpu/mixed_step.py). The prefill kernel takes the prompts, the paged kernel's
# decode tiles the decodes: the chat workload 1.0-1.5% faster on three seeds, W 1.1%
# (calls 66-67). Only for models of at most PREFILL_KERNEL_STEP_MAX_GROUP query heads per
# KV head: Qwen2.5-0.5B's chat run (7 per KV head, head dim 64; the prefill kernel runs a
# program per query head, the paged kernel one per KV head) went from 0.338 to 0.302 of
# its limit with the rule (call 68).
PREFILL_KERNEL_MIN_STEP_TOKENS = 2049
PREFILL_KERNEL_STEP_MAX_GROUP = 4


def uses_prefill_kernel(meta: AttentionMetadata, switches, group: int = 1) -> bool:
    """Whether this step's prefills attend with the prefill kernel (which reads the
    step's own keys, so the fused rotary + cache write must return them): a chunk of
    PREFILL_KERNEL_MIN_QUERY tokens, or PREFILL_KERNEL_MIN_STEP_TOKENS in the step where
    the model has at most PREFILL_KERNEL_STEP_MAX_GROUP query heads per KV head
    (``group``)."""
    return (switches is not None and switches.prefill_attention and not meta.is_decode_only
            and (meta.max_seqlen_q >= PREFILL_KERNEL_MIN_QUERY
                 or (meta.slot_mapping.shape[0] >= PREFILL_KERNEL_MIN_STEP_TOKENS
                     and group <= PREFILL_KERNEL_STEP_MAX_GROUP)))


def attend(q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float, switches=None):
    # query heads per KV head (k is None where the fused cache write kept the keys)
    group = q.shape[1] // (k if k is not None else k_cache).shape[-2]
    if not uses_prefill_kernel(meta, switches, group):
        return paged_attention(q, k_cache, v_cache, meta, scale, switches)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    nd = meta.num_decodes
    if nd:   # decode rows are the step's first nd tokens
        _paged_attention(q[:nd], k_cache, v_cache, meta.block_tables[:nd], meta.seq_lens[:nd],
                         meta.cu_seqlens_q[:nd + 1], 1, scale, out=out[:nd],
                         long_split=switches.decode_long_split, decode_only=True)
    _prefill_attention(q, k, v, k_cache, v_cache, meta.block_tables[nd:], meta.seq_lens[nd:],
                       meta.cu_seqlens_q[nd:], meta.max_seqlen_q, scale, out=out,
                       use_tma=switches.prefill_attention_tma)
    return out


def paged_attention(q, k_cache, v_cache, meta: AttentionMetadata, scale: float,
                    switches=None):
    switches = switches or _NO_SWITCHES
    return _paged_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                            meta.cu_seqlens_q, meta.max_seqlen_q, scale,
                            long_split=switches.decode_long_split,
                            decode_only=meta.is_decode_only and meta.max_seqlen_q == 1,
                            decodes_apart=switches.paged_decodes_apart,
                            decodes_apart_split=switches.paged_decodes_split)


_NO_SWITCHES = KernelSwitches()   # every switch off: callers that pass none
