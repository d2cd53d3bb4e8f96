"""SiLU-and-mul, the gate of Llama-family MLPs: out = silu(x[:, :I]) * x[:, I:].

Computed in fp32 and rounded once to the input dtype. Tolerances against the reference
(which does the same in torch): fp32 atol=rtol=1e-5, fp16 atol=rtol=1e-3, bf16
atol=rtol=1e-2 (one rounding; exp differs by a few fp32 ulps between libraries).
"""
import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import (
    ELEMENTWISE_TOLERANCES, FLOAT_DTYPES, check_tensor, kernel_for,
)

TOLERANCES = ELEMENTWISE_TOLERANCES  # (atol, rtol) per dtype against the reference


@triton.jit
def _silu_and_mul_kernel(
    x_ptr,    # [T, 2 * I]
    out_ptr,  # [T, I]
    inter,    # I
    stride_xt,
    stride_ot,
    BLOCK: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + tok * stride_xt + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + tok * stride_xt + inter + cols, mask=mask, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + tok * stride_ot + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x):
    """x [T, 2I] (rows may be strided, last dim contiguous) -> new tensor [T, I]."""
    check_tensor("x", x, 2, FLOAT_DTYPES)
    num_tokens, width = x.shape
    if width % 2:
        raise ValueError(f"x's last dimension must be even (gate and up halves), got {width}")
    inter = width // 2
    out = torch.empty((num_tokens, inter), dtype=x.dtype, device=x.device)
    if num_tokens == 0 or inter == 0:
        return out
    block = min(1024, triton.next_power_of_2(inter))
    kernel_for(_silu_and_mul_kernel, x.device)[(num_tokens, triton.cdiv(inter, block))](
        x, out, inter, x.stride(0), out.stride(0), BLOCK=block)
    return out


def silu_and_mul_ref(x):
    inter = x.shape[-1] // 2
    xf = x.float()
    return (torch.nn.functional.silu(xf[:, :inter]) * xf[:, inter:]).to(x.dtype)
