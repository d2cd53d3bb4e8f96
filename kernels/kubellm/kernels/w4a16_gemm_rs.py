"""W4A16 GEMM with the weights dequantized in the MMA's own register layout (Hopper's
wgmma takes its A operand from registers: "RS"), for decode batches of 16-256 rows.

The earlier tensor-core kernels (w4a16_gemm_tc.py, "dot") unpack a tile of codes into
16-bit weights in a blocked layout and then convert it to the MMA's operand layout through
shared memory: stores, loads and 6-14 barriers per K step in their SASS. Triton skips that
round trip when every op between the tile's loads and the dot is elementwise on tensors of
the operand's shape, none narrows its type and each input is a load or a constant
(TritonGPU's optimize-dot-operands pass): then the loads themselves land in the operand
layout. So here
- the codes are loaded as 16-bit halves of the packed words (the int32 layout of
  quant_layout.py read as int16: half q of word w holds K rows 8w + 4q .. 8w + 4q + 3),
  a [BLOCK_N, 32] tile per 128 K rows whose column 2r + q is half q of word row r;
- nibble i of that tile is a [BLOCK_N, 32] operand of K rows 128c + 4m + i (m = 2r + q),
  made 16-bit by shift, mask and OR into the mantissa of OFFSET (one bitcast, exact),
  then (v - OFFSET) * scale + bias in 16-bit arithmetic (the scale and bias tiles are
  loaded in the operand's shape too, constant along K);
- x is permuted once per call so that those K rows are contiguous: xp[:, 128c + 32i + m]
  = x[:, 128c + 4m + i] (``permute_x``).
Four dots of K = 32 per 128 K rows; groups must hold whole 128-row chunks. The product runs
transposed, out^T [N, M] = W^T x^T, so that the weights are the register operand.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import is_interpreted, kernel_for, row_bucket
from kubellm.kernels.w4a16_gemv import refusal

CHUNK = 128                      # K rows per step: 16 rows of words
# the 16-bit pattern whose float is OFFSET + c for a code c OR-ed into its mantissa
_OFFSET_BITS = {torch.bfloat16: (0x4300, 128.0), torch.float16: (0x6400, 1024.0)}
# nibble I of a pair of int16 halves (one 32-bit register) as the pair of 16-bit floats
# OFFSET + c: one shift and one LOP3 ((t & mask) | bits) for two weights. In PTX because
# Triton's int16 shifts and masks cost ~3 instructions per weight (PRMTs to take the
# halves apart and put them back: 6.9 a weight in all, SASS built here for sm_90).
_NIBBLE_PTX = "{{ .reg .b32 t; shr.b32 t, $1, {shift}; lop3.b32 $0, t, 0x000F000F, {bits}, 0xEA; }}"


def _nibble_asm(dtype: torch.dtype) -> tuple[str, ...]:
    bits = _OFFSET_BITS[dtype][0]
    return tuple(_NIBBLE_PTX.format(shift=4 * i, bits=f"0x{bits:04X}{bits:04X}")
                 for i in range(4))
TOLERANCES = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


@triton.jit
def _weights(halves, scale, bias, I: tl.constexpr, NIBBLE_ASM: tl.constexpr,
             OFFSET: tl.constexpr, DTYPE: tl.constexpr, PTX: tl.constexpr):
    """Nibble I of int16 ``halves`` [BLOCK_N, 32] as weights c * scale + bias in DTYPE
    (NIBBLE_ASM: _nibble_asm's string for I)."""
    if PTX:
        floats = tl.inline_asm_elementwise(NIBBLE_ASM, "=r,r", [halves], dtype=DTYPE.value,
                                           is_pure=True, pack=2)
        return (floats - OFFSET) * scale + bias
    # the interpreter (no 16-bit arithmetic in numpy): the same values, rounded once
    codes = (halves >> (4 * I)) & 0xF
    return (codes.to(tl.float32) * scale.to(tl.float32) + bias.to(tl.float32)).to(DTYPE)


@triton.jit
def _mma(acc, w, xt, PTX: tl.constexpr):
    if PTX:
        return tl.dot(w, xt, acc)
    return tl.dot(w.to(tl.float32), xt.to(tl.float32), acc)   # numpy has no 16-bit dots


@triton.jit
def _gemm_rs_kernel(
    xp_ptr,       # [M, K] x with each chunk's K rows permuted (permute_x)
    qh_ptr,       # [K // 8, 2 N] int16: the packed int32 codes' halves
    scale_ptr,    # [num_groups, N]
    bias_ptr,     # [num_groups, N]
    out_ptr,      # [M, N] x's dtype
    M, N, K,
    M_BUCKET,     # only the autotuner's key
    stride_xm, stride_qh, stride_sg, stride_om,
    GROUP_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    NIBBLE_ASM_0: tl.constexpr,   # _nibble_asm(x's dtype)
    NIBBLE_ASM_1: tl.constexpr,
    NIBBLE_ASM_2: tl.constexpr,
    NIBBLE_ASM_3: tl.constexpr,
    OFFSET: tl.constexpr,
    PTX: tl.constexpr,
):
    DTYPE: tl.constexpr = xp_ptr.dtype.element_ty
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_n = offs_n < N
    mask_m = offs_m < M
    cols = tl.arange(0, 32)                      # m = 2r + q
    # half q of word row r of column n: int16 index (chunk row + r) * stride + 2n + q
    at_h = qh_ptr + (cols // 2)[None, :] * stride_qh + 2 * offs_n[:, None] + (cols % 2)[None, :]
    at_s = offs_n[:, None] + 0 * cols[None, :]   # a group's scales along K: constant
    at_x = xp_ptr + offs_m[None, :] * stride_xm + cols[:, None]
    mask_w = mask_n[:, None]
    mask_x = mask_m[None, :]
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for c in range(0, K // 128):
        halves = tl.load(at_h + c * 16 * stride_qh, mask=mask_w, other=0)
        g = c * 128 // GROUP_SIZE
        scale = tl.load(scale_ptr + g * stride_sg + at_s, mask=mask_w, other=0.0)
        bias = tl.load(bias_ptr + g * stride_sg + at_s, mask=mask_w, other=0.0)
        x_at = at_x + c * 128
        acc = _mma(acc, _weights(halves, scale, bias, 0, NIBBLE_ASM_0, OFFSET, DTYPE,
                                PTX),
                   tl.load(x_at, mask=mask_x, other=0.0), PTX)
        acc = _mma(acc, _weights(halves, scale, bias, 1, NIBBLE_ASM_1, OFFSET, DTYPE,
                                PTX),
                   tl.load(x_at + 32, mask=mask_x, other=0.0), PTX)
        acc = _mma(acc, _weights(halves, scale, bias, 2, NIBBLE_ASM_2, OFFSET, DTYPE,
                                PTX),
                   tl.load(x_at + 64, mask=mask_x, other=0.0), PTX)
        acc = _mma(acc, _weights(halves, scale, bias, 3, NIBBLE_ASM_3, OFFSET, DTYPE,
                                PTX),
                   tl.load(x_at + 96, mask=mask_x, other=0.0), PTX)
    tl.store(out_ptr + offs_m[None, :] * stride_om + offs_n[:, None], acc.to(DTYPE),
             mask=mask_m[None, :] & mask_n[:, None])


def permute_x(x: torch.Tensor) -> torch.Tensor:
    """[M, K] -> a copy whose column 128c + 32i + m is x's column 128c + 4m + i."""
    m, k = x.shape
    return x.unflatten(1, (k // CHUNK, 32, 4)).transpose(2, 3).reshape(m, k)


# (BLOCK_N, BLOCK_M, num_warps, num_stages): one warpgroup per 64 weight rows
CONFIGS = ((128, 16, 8, 3), (128, 32, 8, 3), (128, 64, 8, 3), (64, 64, 4, 4),
           (128, 128, 8, 3), (256, 64, 8, 3), (128, 256, 8, 2))
_TUNED: dict[int, object] = {}


def _tuned(group_size: int):
    tuned = _TUNED.get(group_size)
    if tuned is None:
        tuned = triton.autotune(
            configs=[triton.Config({"BLOCK_N": n, "BLOCK_M": m}, num_warps=w, num_stages=s)
                     for n, m, w, s in CONFIGS],
            key=["M_BUCKET", "N", "K"])(_gemm_rs_kernel)
        _TUNED[group_size] = tuned
    return tuned


def unsupported_reason(x: torch.Tensor, k: int, group_size: int, bits: int,
                       has_g_idx: bool) -> str | None:
    """Why this kernel cannot take the call (None: it can; any number of rows)."""
    return refusal(x, k, group_size, bits, has_g_idx, x.shape[0], CHUNK)


def launch(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
           biases: torch.Tensor, group_size: int,
           config: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """x [M, K] @ W -> new [M, N] in x's dtype, for arguments w4a16_gemm has checked and
    ``unsupported_reason`` takes (call ``w4a16_gemm(..., variant="gemm-rs")``). ``config``:
    (BLOCK_N, BLOCK_M, num_warps, num_stages) instead of the autotuner's choice."""
    m, k = x.shape
    n = qweight.shape[1]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if n == 0 or m == 0:
        return out
    xp = permute_x(x)
    halves = qweight.view(torch.int16)             # [K // 8, 2 N]
    interpreted = is_interpreted(_gemm_rs_kernel)
    asm = _nibble_asm(x.dtype)
    kwargs = dict(GROUP_SIZE=group_size, NIBBLE_ASM_0=asm[0], NIBBLE_ASM_1=asm[1],
                  NIBBLE_ASM_2=asm[2], NIBBLE_ASM_3=asm[3], OFFSET=_OFFSET_BITS[x.dtype][1],
                  PTX=not interpreted)
    tuned = None if interpreted else _tuned(group_size)
    if interpreted and config is None:
        config = (32, 16, 4, 1)
    if config is not None:
        block_n, block_m, warps, stages = config
        kwargs.update(BLOCK_N=block_n, BLOCK_M=block_m)
        if not interpreted:
            kwargs.update(num_warps=warps, num_stages=stages)
        tuned = None
    kernel = kernel_for(_gemm_rs_kernel, x.device, tuned=tuned)

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(m, meta["BLOCK_M"]))
    kernel[grid](xp, halves, scales, biases, out, m, n, k, row_bucket(m), xp.stride(0),
                 halves.stride(0),
                 scales.stride(0), out.stride(0), **kwargs)
    return out
