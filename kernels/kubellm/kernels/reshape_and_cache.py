"""Write this step's keys and values into the paged KV cache through the slot mapping.

``slot = block_id * block_size + offset``; a negative slot means "no slot" (padding tokens
of a CUDA-graph batch) and that token is skipped. The op is a pure copy (or, into an FP8
cache, a cast: kv_cache_fp8.py), so the kernel must match the reference exactly
(tolerance 0 in every dtype).
"""
import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import (
    FLOAT_DTYPES, check_kv_cache, check_shape, check_tensor, is_interpreted, kernel_for,
)
from kubellm.kernels.kv_cache_fp8 import to_cache
from kubellm.kernels.kv_fp8_format import is_fp8, storage_view, to_cache_dtype


@triton.jit
def _write_kv_cache_kernel(
    key_ptr,           # [T, Hkv, D]
    value_ptr,         # [T, Hkv, D]
    k_cache_ptr,       # [num_blocks, BLOCK_SIZE, Hkv, D]
    v_cache_ptr,       # [num_blocks, BLOCK_SIZE, Hkv, D]
    slot_mapping_ptr,  # [T] int64
    stride_kt, stride_kh,
    stride_vt, stride_vh,
    stride_cb, stride_ct, stride_ch,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEADS_POW2: tl.constexpr,
    DIM_POW2: tl.constexpr,
    KV_FP8: tl.constexpr,
    EMULATE_ROUNDING: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + tok).to(tl.int64)
    if slot < 0:
        return
    heads = tl.arange(0, HEADS_POW2)
    dims = tl.arange(0, DIM_POW2)
    mask = (heads[:, None] < NUM_KV_HEADS) & (dims[None, :] < HEAD_DIM)
    k = tl.load(key_ptr + tok * stride_kt + heads[:, None] * stride_kh + dims[None, :], mask=mask)
    v = tl.load(value_ptr + tok * stride_vt + heads[:, None] * stride_vh + dims[None, :], mask=mask)
    # int64 slot: block_id * stride_cb overflows int32 in pools over 2 GiB.
    cache_off = ((slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_ct
                 + heads[:, None] * stride_ch + dims[None, :])
    tl.store(k_cache_ptr + cache_off, to_cache(k, k_cache_ptr, KV_FP8, EMULATE_ROUNDING),
             mask=mask)
    tl.store(v_cache_ptr + cache_off, to_cache(v, v_cache_ptr, KV_FP8, EMULATE_ROUNDING),
             mask=mask)


def write_kv_cache(key, value, k_cache, v_cache, slot_mapping):
    """Copy key/value [T, Hkv, D] (strided views allowed, last dim contiguous) into
    k_cache/v_cache [num_blocks, block_size, Hkv, D] (key's dtype, or FP8 E4M3) at
    `slot_mapping` [T] int64, in place. Slots < 0 are skipped. Slots past the pool are not checked (that would need a sync)."""
    check_tensor("key", key, 3, FLOAT_DTYPES)
    device = key.device
    check_tensor("value", value, 3, (key.dtype,), device)
    check_shape("value", value, key.shape)
    check_kv_cache(k_cache, v_cache, key.dtype, device)
    num_tokens, num_kv_heads, head_dim = key.shape
    if tuple(k_cache.shape[2:]) != (num_kv_heads, head_dim):
        raise ValueError(f"k_cache heads/head_dim {tuple(k_cache.shape[2:])} do not match "
                         f"key's {(num_kv_heads, head_dim)}")
    check_tensor("slot_mapping", slot_mapping, 1, (torch.int64,), device)
    check_shape("slot_mapping", slot_mapping, (num_tokens,))
    if num_tokens == 0:
        return
    kernel_for(_write_kv_cache_kernel, device)[(num_tokens,)](
        key, value, k_cache, v_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim, BLOCK_SIZE=k_cache.shape[1],
        HEADS_POW2=triton.next_power_of_2(num_kv_heads),
        DIM_POW2=triton.next_power_of_2(head_dim),
        KV_FP8=is_fp8(k_cache),
        EMULATE_ROUNDING=is_fp8(k_cache) and is_interpreted(_write_kv_cache_kernel),
    )


def write_kv_cache_ref(key, value, k_cache, v_cache, slot_mapping):
    """Plain-torch reference, in place like the kernel."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    block_size = k_cache.shape[1]
    for cache, new in ((k_cache, key), (v_cache, value)):
        stored = storage_view(to_cache_dtype(new[keep], cache))
        storage_view(cache)[slots // block_size, slots % block_size] = stored
