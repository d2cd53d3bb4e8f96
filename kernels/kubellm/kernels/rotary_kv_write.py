"""Rotary embedding fused into the KV-cache write: one kernel where a decoder layer
otherwise launches three (rotate q, rotate k, write k and v into the paged cache).

Per token: q and k are rotated (neox / rotate-half style, the math of ``rotary.py``, in
fp32, rounded once), the rotated q goes to a new tensor, the rotated k and the value go
straight into the cache at ``slot_mapping[t]`` (slot < 0: not written, as in
``reshape_and_cache``). The rotated keys are not otherwise materialised, which is what
saves the round trip; ``return_key=True`` also returns them (a prefill kernel that
reads the step's keys from a contiguous tensor wants them).

Tolerances against ``rotary_kv_write_ref`` (``apply_rotary_ref`` + ``write_kv_cache_ref``):
``TOLERANCES`` = fp32 atol=rtol=1e-5, fp16 1e-3, bf16 1e-2 for q and the written keys (one
rounding of the output); the values are copied exactly. Into an FP8 cache the keys are
rounded to the model dtype, then to E4M3, as the reference does.
"""

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import (
    ELEMENTWISE_TOLERANCES, FLOAT_DTYPES, check_contiguous, check_kv_cache, check_shape,
    check_tensor, is_interpreted, kernel_for,
)
from kubellm.kernels.kv_cache_fp8 import to_cache
from kubellm.kernels.kv_fp8_format import is_fp8
from kubellm.kernels.reshape_and_cache import write_kv_cache_ref
from kubellm.kernels.rotary import apply_rotary_ref

TOLERANCES = ELEMENTWISE_TOLERANCES  # (atol, rtol) per dtype against the reference


@triton.jit
def _rotate_half(x_ptr, x_off, mask, cos, sin, HALF: tl.constexpr):
    """(x1*cos - x2*sin, x2*cos + x1*sin) in fp32 for the rows at ``x_off``."""
    x1 = tl.load(x_ptr + x_off, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + x_off + HALF, mask=mask, other=0.0).to(tl.float32)
    return x1 * cos[None, :] - x2 * sin[None, :], x2 * cos[None, :] + x1 * sin[None, :]


@triton.jit
def _rotary_kv_write_kernel(
    positions_ptr,    # [T] int64
    q_ptr,            # [T, Hq, D]
    k_ptr,            # [T, Hkv, D]
    v_ptr,            # [T, Hkv, D]
    cos_sin_ptr,      # [max_position, D] fp32
    slot_mapping_ptr,  # [T] int64
    q_out_ptr,        # [T, Hq, D] contiguous
    k_out_ptr,        # [T, Hkv, D] contiguous (RETURN_KEY)
    k_cache_ptr,      # [num_blocks, BLOCK_SIZE, Hkv, D]
    v_cache_ptr,      # [num_blocks, BLOCK_SIZE, Hkv, D]
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_ct, stride_ch,
    NUM_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEADS_POW2: tl.constexpr,
    KV_HEADS_POW2: tl.constexpr,
    HALF_POW2: tl.constexpr,
    RETURN_KEY: tl.constexpr,
    KV_FP8: tl.constexpr,
    EMULATE_ROUNDING: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions_ptr + tok).to(tl.int64)
    cols = tl.arange(0, HALF_POW2)
    col_ok = cols < HALF
    cos = tl.load(cos_sin_ptr + pos * (2 * HALF) + cols, mask=col_ok, other=0.0)
    sin = tl.load(cos_sin_ptr + pos * (2 * HALF) + HALF + cols, mask=col_ok, other=0.0)

    heads = tl.arange(0, HEADS_POW2)
    q_mask = (heads[:, None] < NUM_HEADS) & col_ok[None, :]
    q1, q2 = _rotate_half(q_ptr, tok * stride_qt + heads[:, None] * stride_qh + cols[None, :],
                          q_mask, cos, sin, HALF)
    q_off = (tok * NUM_HEADS + heads[:, None]) * (2 * HALF) + cols[None, :]
    tl.store(q_out_ptr + q_off, q1.to(q_out_ptr.dtype.element_ty), mask=q_mask)
    tl.store(q_out_ptr + q_off + HALF, q2.to(q_out_ptr.dtype.element_ty), mask=q_mask)

    kv_heads = tl.arange(0, KV_HEADS_POW2)
    kv_mask = (kv_heads[:, None] < NUM_KV_HEADS) & col_ok[None, :]
    k1, k2 = _rotate_half(k_ptr, tok * stride_kt + kv_heads[:, None] * stride_kh + cols[None, :],
                          kv_mask, cos, sin, HALF)
    # rounded once to the model dtype: the returned keys, and what an FP8 cache rounds
    k1 = k1.to(q_out_ptr.dtype.element_ty)
    k2 = k2.to(q_out_ptr.dtype.element_ty)
    if RETURN_KEY:
        k_off = (tok * NUM_KV_HEADS + kv_heads[:, None]) * (2 * HALF) + cols[None, :]
        tl.store(k_out_ptr + k_off, k1, mask=kv_mask)
        tl.store(k_out_ptr + k_off + HALF, k2, mask=kv_mask)
    slot = tl.load(slot_mapping_ptr + tok).to(tl.int64)
    if slot >= 0:
        # int64 slot: block_id * stride_cb overflows int32 in pools over 2 GiB.
        cache_off = ((slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_ct
                     + kv_heads[:, None] * stride_ch + cols[None, :])
        tl.store(k_cache_ptr + cache_off, to_cache(k1, k_cache_ptr, KV_FP8, EMULATE_ROUNDING),
                 mask=kv_mask)
        tl.store(k_cache_ptr + cache_off + HALF,
                 to_cache(k2, k_cache_ptr, KV_FP8, EMULATE_ROUNDING), mask=kv_mask)
        v_off = tok * stride_vt + kv_heads[:, None] * stride_vh + cols[None, :]
        v1 = tl.load(v_ptr + v_off, mask=kv_mask)
        v2 = tl.load(v_ptr + v_off + HALF, mask=kv_mask)
        tl.store(v_cache_ptr + cache_off, to_cache(v1, v_cache_ptr, KV_FP8, EMULATE_ROUNDING),
                 mask=kv_mask)
        tl.store(v_cache_ptr + cache_off + HALF,
                 to_cache(v2, v_cache_ptr, KV_FP8, EMULATE_ROUNDING), mask=kv_mask)


def _check(positions, q, k, v, k_cache, v_cache, slot_mapping, cos_sin_cache):
    check_tensor("q", q, 3, FLOAT_DTYPES)
    device = q.device
    num_tokens, _, head_dim = q.shape
    check_tensor("k", k, 3, (q.dtype,), device)
    check_tensor("v", v, 3, (q.dtype,), device)
    check_shape("v", v, k.shape)
    if k.shape[0] != num_tokens or k.shape[2] != head_dim:
        raise ValueError(f"k shape {tuple(k.shape)} does not match q shape {tuple(q.shape)}")
    if head_dim % 2:
        raise ValueError(f"head_dim must be even for rotary embedding, got {head_dim}")
    check_kv_cache(k_cache, v_cache, q.dtype, device)
    if tuple(k_cache.shape[2:]) != tuple(k.shape[1:]):
        raise ValueError(f"k_cache heads/head_dim {tuple(k_cache.shape[2:])} do not match "
                         f"k's {tuple(k.shape[1:])}")
    check_tensor("positions", positions, 1, (torch.int64,), device)
    check_shape("positions", positions, (num_tokens,))
    check_tensor("slot_mapping", slot_mapping, 1, (torch.int64,), device)
    check_shape("slot_mapping", slot_mapping, (num_tokens,))
    check_tensor("cos_sin_cache", cos_sin_cache, 2, (torch.float32,), device)
    check_contiguous("cos_sin_cache", cos_sin_cache)
    if cos_sin_cache.shape[1] != head_dim:
        raise ValueError(f"cos_sin_cache has {cos_sin_cache.shape[1]} columns, head_dim is "
                         f"{head_dim}")


def rotary_kv_write(positions, q, k, v, k_cache, v_cache, slot_mapping, cos_sin_cache,
                    return_key: bool = False):
    """positions [T] int64; q [T, Hq, D], k and v [T, Hkv, D] (strided views allowed, last
    dim contiguous); caches [num_blocks, block_size, Hkv, D] (q's dtype or FP8 E4M3,
    kv_cache_fp8.py); slot_mapping [T] int64;
    cos_sin_cache [max_position, D] fp32. Writes rotate(k) and v into the caches in place
    and returns rotate(q) (a new contiguous tensor), or (rotate(q), rotate(k)) with
    ``return_key``. Positions and slots past their tables are not checked (a sync)."""
    _check(positions, q, k, v, k_cache, v_cache, slot_mapping, cos_sin_cache)
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device) if return_key else q_out
    if num_tokens:
        kernel_for(_rotary_kv_write_kernel, q.device)[(num_tokens,)](
            positions, q, k, v, cos_sin_cache, slot_mapping, q_out, k_out, k_cache, v_cache,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            NUM_HEADS=num_heads, NUM_KV_HEADS=num_kv_heads, HALF=head_dim // 2,
            BLOCK_SIZE=k_cache.shape[1], HEADS_POW2=triton.next_power_of_2(num_heads),
            KV_HEADS_POW2=triton.next_power_of_2(num_kv_heads),
            HALF_POW2=triton.next_power_of_2(head_dim // 2), RETURN_KEY=return_key,
            KV_FP8=is_fp8(k_cache),
            EMULATE_ROUNDING=is_fp8(k_cache) and is_interpreted(_rotary_kv_write_kernel),
        )
    return (q_out, k_out) if return_key else q_out


def rotary_kv_write_ref(positions, q, k, v, k_cache, v_cache, slot_mapping, cos_sin_cache,
                        return_key: bool = False):
    """Plain torch: the rotary reference, then the cache-write reference (in place)."""
    q_rot, k_rot = apply_rotary_ref(positions, q, k, cos_sin_cache)
    write_kv_cache_ref(k_rot, v, k_cache, v_cache, slot_mapping)
    return (q_rot, k_rot) if return_key else q_rot
