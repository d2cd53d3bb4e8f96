"""RMSNorm, and RMSNorm fused with the residual add that precedes it in every block.

``rms_norm(x)`` = x / sqrt(mean(x^2) + eps) * weight, in fp32, rounded once to x's dtype.
``fused_add_rms_norm(x, residual)`` returns (normed, new_residual): new_residual =
x + residual rounded to the dtype (what an eager ``residual + x`` stores), and normed is
rms_norm of that stored value, as the Hugging Face Llama layers compute it. Neither
function writes to its inputs.

Tolerances against the references: fp32 atol=rtol=1e-5, fp16 atol=rtol=1e-3, bf16
atol=rtol=1e-2 (one rounding of the output; the sum of squares is reduced in another
order); new_residual matches exactly.
"""
import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import (
    ELEMENTWISE_TOLERANCES, FLOAT_DTYPES, check_shape, check_tensor, kernel_for,
)

TOLERANCES = ELEMENTWISE_TOLERANCES  # (atol, rtol) per dtype against the reference


@triton.jit
def _rms_norm_kernel(
    x_ptr,             # [T, H] or [T, heads, H] (rows of heads, e.g. Qwen3's q/k norm)
    residual_ptr,      # [T, H]  (HAS_RESIDUAL)
    weight_ptr,        # [H]
    out_ptr,           # [T, H] or [T, heads, H] contiguous
    new_residual_ptr,  # [T, H]  (HAS_RESIDUAL)
    hidden,
    eps,
    heads,             # rows per token (1 for [T, H])
    stride_xt, stride_xh, stride_rt, stride_ot, stride_nt,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)   # the row: token * heads + head
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x_row = (tok // heads) * stride_xt + (tok % heads) * stride_xh
    x = tl.load(x_ptr + x_row + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + tok * stride_rt + cols, mask=mask, other=0.0).to(tl.float32)
        summed = (x + r).to(new_residual_ptr.dtype.element_ty)
        tl.store(new_residual_ptr + tok * stride_nt + cols, summed, mask=mask)
        x = summed.to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(x * x, 0) / hidden + eps)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + tok * stride_ot + cols, (x * inv_rms * w).to(out_ptr.dtype.element_ty),
             mask=mask)


def _launch(x, residual, weight, eps):
    check_tensor("x", x, 3 if residual is None and x.dim() == 3 else 2, FLOAT_DTYPES)
    heads, stride_xh = (x.shape[1], x.stride(1)) if x.dim() == 3 else (1, 0)
    shape = x.shape
    num_tokens, hidden = x.shape[0] * heads, x.shape[-1]
    check_tensor("weight", weight, 1, FLOAT_DTYPES, x.device)
    check_shape("weight", weight, (hidden,))
    if residual is not None:
        check_tensor("residual", residual, 2, (x.dtype,), x.device)
        check_shape("residual", residual, x.shape)
    if not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"eps must be a non-negative float, got {eps!r}")
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    new_residual = torch.empty_like(out) if residual is not None else out
    if num_tokens == 0:
        return out, new_residual
    block = triton.next_power_of_2(hidden)
    kernel_for(_rms_norm_kernel, x.device)[(num_tokens,)](
        x, residual if residual is not None else x, weight, out, new_residual, hidden, float(eps),
        heads, x.stride(0), stride_xh, residual.stride(0) if residual is not None else 0,
        hidden, new_residual.stride(0),
        HAS_RESIDUAL=residual is not None, BLOCK=block,
        num_warps=min(16, max(1, block // 512)),
    )
    return out, new_residual


def rms_norm(x, weight, eps: float):
    """x [T, H] or [T, heads, H] (strided views allowed, last dim contiguous), weight [H]
    -> a new contiguous tensor of x's shape and dtype, each row of H normalised."""
    return _launch(x, None, weight, eps)[0]


def fused_add_rms_norm(x, residual, weight, eps: float):
    """-> (rms_norm(x + residual) * weight, x + residual), both new tensors."""
    if residual is None:
        raise ValueError("residual must be a tensor; use rms_norm for the first layer")
    return _launch(x, residual, weight, eps)


def rms_norm_ref(x, weight, eps: float):
    xf = x.float()
    inv_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * inv_rms * weight.float()).to(x.dtype)


def fused_add_rms_norm_ref(x, residual, weight, eps: float):
    new_residual = (x.float() + residual.float()).to(x.dtype)
    return rms_norm_ref(new_residual, weight, eps), new_residual
