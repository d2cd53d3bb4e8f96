"""Per-token FP8 (E4M3) quantization of activations in one kernel: x [M, K] -> (codes [M, K]
float8_e4m3fn, scales [M, 1] float32), scale = max(max |row| / 448, min_scale), codes =
the E4M3 value nearest to x / scale, clamped to +-448.

The FP8 linear (runtime ``layers/quantization/fp8.py``) quantizes each linear's input this
way before ``torch._scaled_mm``. In torch that is a float copy, an amax, a division, a
clamp and a cast, each a kernel over the activations; at decode sizes those small
kernels, 128 linears per step for an 8B model, took a batch-1 step from bf16's 4.82 ms to
6.76 ms on the H200 (benchmarks/results/gpu-h200-2026-12-02/call17). One program per
row reads it twice (the max, then the codes; the second read hits L2) and writes codes
and scale.

The codes equal the torch reference's exactly: the scale is the row's max times the fp32
reciprocal of 448 (as the reference writes it; torch on CUDA turns ``/ 448`` into that
product while the CPU divides, and the first H200 run of this kernel, which divided,
missed the CUDA reference by a code at some rows), the division by the scale is IEEE
(``div_rn``, as torch divides two tensors; Triton's ``/`` on fp32 is approximate on the
GPU) and the cast rounds to nearest even. Under the interpreter the cast is preceded by
the rounding emulation of kv_cache_fp8.py (the interpreter's float -> FP8 cast
mis-rounds).
"""
import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import FLOAT_DTYPES, check_tensor, is_interpreted, kernel_for
from kubellm.kernels.kv_cache_fp8 import round_to_e4m3
from kubellm.kernels.kv_fp8_format import FP8_MAX, KV_FP8_DTYPE as FP8

_E4M3_MAX = tl.constexpr(FP8_MAX)   # a kernel may read only constexpr globals
_INV_E4M3_MAX = tl.constexpr(1.0 / FP8_MAX)
BLOCK_MAX = 4096   # columns per pass; wider rows loop


@triton.jit
def _per_token_fp8_kernel(
    x_ptr,        # [M, K] bf16 / fp16 / fp32
    codes_ptr,    # [M, K] float8_e4m3fn, contiguous
    scale_ptr,    # [M] float32
    K, stride_xm, min_scale,
    BLOCK: tl.constexpr,
    EMULATE_ROUNDING: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    amax = tl.zeros((BLOCK,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        cols = k0 + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    scale = tl.maximum(tl.max(amax, 0) * _INV_E4M3_MAX, min_scale)
    tl.store(scale_ptr + row, scale)
    for k0 in range(0, K, BLOCK):
        cols = k0 + tl.arange(0, BLOCK)
        mask = cols < K
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        q = tl.minimum(tl.maximum(tl.math.div_rn(x, scale), -_E4M3_MAX), _E4M3_MAX)
        if EMULATE_ROUNDING:
            q = round_to_e4m3(q)
        tl.store(codes_ptr + row * K + cols, q.to(codes_ptr.dtype.element_ty), mask=mask)


def per_token_fp8(x: torch.Tensor, min_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (codes [M, K] float8_e4m3fn, scales [M, 1] float32)."""
    check_tensor("x", x, 2, FLOAT_DTYPES)
    m, k = x.shape
    codes = torch.empty((m, k), dtype=FP8, device=x.device)
    scales = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m == 0 or k == 0:
        return codes, scales.fill_(min_scale)
    block = min(BLOCK_MAX, triton.next_power_of_2(k))
    kernel = _per_token_fp8_kernel
    kernel_for(kernel, x.device)[(m,)](
        x, codes, scales, k, x.stride(0), float(min_scale), BLOCK=block,
        EMULATE_ROUNDING=is_interpreted(kernel), num_warps=min(8, max(1, block // 256)))
    return codes, scales


def per_token_fp8_ref(x: torch.Tensor, min_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The same in torch (what the FP8 linear runs without the kernel)."""
    xf = x.float()
    scales = (xf.abs().amax(dim=1, keepdim=True) * (1.0 / FP8_MAX)).clamp_(min=min_scale)
    return (xf / scales).clamp_(-FP8_MAX, FP8_MAX).to(FP8), scales
