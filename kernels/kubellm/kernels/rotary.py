"""Rotary position embedding, neox / rotate-half style (as Llama in HF transformers).

For each head, with x1 = x[:D/2] and x2 = x[D/2:]:
``out1 = x1*cos - x2*sin``, ``out2 = x2*cos + x1*sin``, cos/sin taken from row
``positions[t]`` of ``cos_sin_cache`` [max_position, D] (first D/2 columns cos, last D/2
sin, fp32). Computed in fp32, rounded once. ``apply_rotary`` returns new tensors.

``build_cos_sin_cache`` implements the default inverse frequencies and ``llama3`` scaling
the way ``transformers.modeling_rope_utils`` does (tested against it).

Tolerances against ``apply_rotary_ref``: fp32 atol=rtol=1e-5, fp16 atol=rtol=1e-3,
bf16 atol=rtol=1e-2 (one rounding of the output).
"""

import torch
import triton
import triton.language as tl

from kubellm.kernels.rope_cache import build_cos_sin_cache  # noqa: F401  (re-exported)
from kubellm.kernels._launch import (
    ELEMENTWISE_TOLERANCES, FLOAT_DTYPES, check_contiguous, check_tensor, kernel_for,
)

TOLERANCES = ELEMENTWISE_TOLERANCES  # (atol, rtol) per dtype against the reference


@triton.jit
def _rotary_kernel(
    positions_ptr,  # [T] int64
    x_ptr,          # [T, H, D]
    out_ptr,        # [T, H, D] contiguous
    cos_sin_ptr,    # [max_position, D] fp32
    num_heads,
    stride_xt, stride_xh,
    HALF: tl.constexpr,
    HEADS_POW2: tl.constexpr,
    HALF_POW2: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions_ptr + tok).to(tl.int64)
    heads = tl.arange(0, HEADS_POW2)
    cols = tl.arange(0, HALF_POW2)
    col_ok = cols < HALF
    cos = tl.load(cos_sin_ptr + pos * (2 * HALF) + cols, mask=col_ok, other=0.0)
    sin = tl.load(cos_sin_ptr + pos * (2 * HALF) + HALF + cols, mask=col_ok, other=0.0)
    mask = (heads[:, None] < num_heads) & col_ok[None, :]
    x_off = tok * stride_xt + heads[:, None] * stride_xh + cols[None, :]
    x1 = tl.load(x_ptr + x_off, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + x_off + HALF, mask=mask, other=0.0).to(tl.float32)
    out1 = x1 * cos[None, :] - x2 * sin[None, :]
    out2 = x2 * cos[None, :] + x1 * sin[None, :]
    o_off = (tok * num_heads + heads[:, None]) * (2 * HALF) + cols[None, :]
    tl.store(out_ptr + o_off, out1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + o_off + HALF, out2.to(out_ptr.dtype.element_ty), mask=mask)


def _rotate(positions, x, cos_sin_cache):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    num_tokens, num_heads, head_dim = x.shape
    if num_tokens == 0 or num_heads == 0:
        return out
    kernel_for(_rotary_kernel, x.device)[(num_tokens,)](
        positions, x, out, cos_sin_cache, num_heads, x.stride(0), x.stride(1),
        HALF=head_dim // 2, HEADS_POW2=triton.next_power_of_2(num_heads),
        HALF_POW2=triton.next_power_of_2(head_dim // 2),
    )
    return out


def apply_rotary(positions, q, k, cos_sin_cache):
    """positions [T] int64, q [T, Hq, D], k [T, Hkv, D] (strided views allowed, last dim
    contiguous), cos_sin_cache [max_position, D] fp32 contiguous -> (q_rot, k_rot), new
    contiguous tensors. Positions past the cache are not checked (that needs a sync)."""
    check_tensor("q", q, 3, FLOAT_DTYPES)
    device = q.device
    check_tensor("k", k, 3, (q.dtype,), device)
    check_tensor("positions", positions, 1, (torch.int64,), device)
    check_tensor("cos_sin_cache", cos_sin_cache, 2, (torch.float32,), device)
    check_contiguous("cos_sin_cache", cos_sin_cache)
    num_tokens, _, head_dim = q.shape
    if head_dim % 2:
        raise ValueError(f"head_dim must be even for rotary embedding, got {head_dim}")
    if k.shape[0] != num_tokens or k.shape[2] != head_dim:
        raise ValueError(f"k shape {tuple(k.shape)} does not match q shape {tuple(q.shape)}")
    if positions.shape[0] != num_tokens:
        raise ValueError(f"positions has {positions.shape[0]} entries for {num_tokens} tokens")
    if cos_sin_cache.shape[1] != head_dim:
        raise ValueError(f"cos_sin_cache has {cos_sin_cache.shape[1]} columns, head_dim is {head_dim}")
    return _rotate(positions, q, cos_sin_cache), _rotate(positions, k, cos_sin_cache)


def apply_rotary_ref(positions, q, k, cos_sin_cache):
    half = cos_sin_cache.shape[1] // 2
    cos = cos_sin_cache[positions, :half][:, None, :]
    sin = cos_sin_cache[positions, half:][:, None, :]

    def rotate(x):
        x1, x2 = x[..., :half].float(), x[..., half:].float()
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)

    return rotate(q), rotate(k)
