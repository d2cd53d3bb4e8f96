"""W4A16 GEMV: out = x @ W for a few rows of x (decode), W as packed 4-bit codes
(quant_layout.py), fp16/bf16 activations, fp32 sums, no tensor cores.

Reading 4-bit weights at the H200's ~4.2 TB/s is ~8.4 T codes/s against ~33 T issued
lane-instructions/s, so a kernel has ~3 instructions per code before it is bound by
issuing them; w4a16_gemm's "dot" spent 8-9 (ncu, call 29) and read at 0.17-0.30 of the
copy bandwidth. Here a code costs one LOP3 (and half a shift) to become a float and one
FMA: its four bits are masked into the mantissa of 2**(23 - P) (P = 12 or 16, where a
shift put them), which gives the float 2**(23 - P) + c exactly; so sum_j x_j f_j minus
sum_j x_j 2**(23 - P_j) (once per K row) is sum_j x_j c_j, and a group's scale and bias
are applied once per column: sum_k x_k (c_k s + b) = s sum x c + b sum x. The offsets
make the fp32 sums carry up to 2**11 sum|x| beside sum x c: ~12 bits of it survive beyond
bf16's 8. The word's eight codes are done in PTX (_WORD_DOT_PTX).

A program takes CHUNKS chunks of ROWS rows of words (8 K rows each; a chunk's rows in one
group) and BLOCK_N columns, one row at a time as a [BLOCK_N] vector, so a thread holds
several columns and the x work of a row (eight loads and sums) is shared by them. K is
split over programs; the splits meet in the split-K workspace (split_k.py): one kernel
per call. On the H200 (call 30) it executed 4.1 instructions per weight and read the
Llama-3-8B projections at one row at 0.31-0.63 of the copy bandwidth, a 4-bit LM head at
0.76 (benchmarks/results/gpu-h200-2026-12-02s11).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import is_interpreted, kernel_for
from kubellm.kernels.split_k import check_tiles, sum_splits, workspace

MAX_M = 4
DTYPES = (torch.float16, torch.bfloat16)
# against w4a16_gemm_ref: the output's rounding plus the fp32 sums' ~2**-12 of sum x c
TOLERANCES = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


@triton.jit
def _offset_floats(shifted, P: tl.constexpr):
    """Bits P..P+3 of ``shifted`` as the float 2**(23 - P) + code: masked into the
    mantissa of 2**(23 - P), whose last bit is worth 2**-P (one LOP3, a free bitcast)."""
    return ((shifted & (0xF << P)) | ((150 - P) << 23)).to(tl.float32, bitcast=True)


# acc + sum_j x_j * f_j over a word's eight codes, f_j = 2**(23 - P_j) + c_j (what
# _offset_floats gives; P_j = 12, 12, 16, 12, 16, 12, 16, 12) in 20 instructions: 4
# shifts, 8 LOP3, 8 FMA. $0 the sum, $1 the word, $2..$9 x_0..x_7, $10 acc. In PTX because
# Triton's code for the same expressions (the PTX=False path) compiles for sm_90 to twice
# the LOP3s (AND and OR apart): 1,360 SASS instructions for a thread's 256 weights
# against 1,112 (BLOCK_N 1024, ROWS 8, 8 warps; tests/kernels/sass_for_hopper.py).
_WORD_DOT_PTX = tl.constexpr("""
{
.reg .b32 %kq<4>, %km<8>, %ka;
shl.b32 %kq0, $1, 12;
shl.b32 %kq1, $1, 8;
shr.u32 %kq2, $1, 8;
shr.u32 %kq3, $1, 16;
lop3.b32 %km0, %kq0, 0xF000, 0x45000000, 0xEA;
lop3.b32 %km1, %kq1, 0xF000, 0x45000000, 0xEA;
lop3.b32 %km2, %kq1, 0xF0000, 0x43000000, 0xEA;
lop3.b32 %km3, $1, 0xF000, 0x45000000, 0xEA;
lop3.b32 %km4, $1, 0xF0000, 0x43000000, 0xEA;
lop3.b32 %km5, %kq2, 0xF000, 0x45000000, 0xEA;
lop3.b32 %km6, %kq2, 0xF0000, 0x43000000, 0xEA;
lop3.b32 %km7, %kq3, 0xF000, 0x45000000, 0xEA;
fma.rn.f32 %ka, $2, %km0, $10;
fma.rn.f32 %ka, $3, %km1, %ka;
fma.rn.f32 %ka, $4, %km2, %ka;
fma.rn.f32 %ka, $5, %km3, %ka;
fma.rn.f32 %ka, $6, %km4, %ka;
fma.rn.f32 %ka, $7, %km5, %ka;
fma.rn.f32 %ka, $8, %km6, %ka;
fma.rn.f32 %ka, $9, %km7, %ka;
mov.b32 $0, %ka;
}
""")
_WORD_DOT_CONSTRAINTS = tl.constexpr("=r," + ",".join(["r"] * 10))


@triton.jit
def _word_dot(a, w, x0, x1, x2, x3, x4, x5, x6, x7, PTX: tl.constexpr):
    """a + sum_j x_j (2**(23 - P_j) + c_j): [BLOCK_M, BLOCK_N] words' dots."""
    if PTX:
        return tl.inline_asm_elementwise(
            _WORD_DOT_PTX, _WORD_DOT_CONSTRAINTS,
            [tl.broadcast_to(w, a.shape), x0, x1, x2, x3, x4, x5, x6, x7, a],
            dtype=tl.float32, is_pure=True, pack=1)
    w_l8 = w << 8
    w_r8 = w >> 8      # arithmetic shifts: the sign bits they bring in are masked off
    a += x0 * _offset_floats(w << 12, 12)
    a += x1 * _offset_floats(w_l8, 12)
    a += x2 * _offset_floats(w_l8, 16)
    a += x3 * _offset_floats(w, 12)
    a += x4 * _offset_floats(w, 16)
    a += x5 * _offset_floats(w_r8, 12)
    a += x6 * _offset_floats(w_r8, 16)
    a += x7 * _offset_floats(w >> 16, 12)
    return a


@triton.jit
def _gemv_kernel(
    x_ptr,        # [M, K] activations, M <= MAX_M
    qw_ptr,       # [K // 8, N] int32 codes
    scale_ptr,    # [num_groups, N]
    bias_ptr,     # [num_groups, N]
    out_ptr,      # [M, N] x's dtype
    ws_ptr,       # [>= M, N] fp32 zeros, left zero
    count_ptr,    # [>= N tiles] int32 zeros, left zero
    M, N, K,
    M_BUCKET,     # rows rounded up to a power of two: only the autotuner's key
    stride_xm, stride_qk, stride_sg, stride_om, stride_wm,
    GROUP_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,           # word rows (8 K rows each) per chunk, in one group
    CHUNKS: tl.constexpr,         # chunks per program (fewer splits to sum)
    EVEN_N: tl.constexpr,         # N % BLOCK_N == 0: no masks on the words
    PTX: tl.constexpr,            # the words' dots in _WORD_DOT_PTX (False: interpreter)
):
    """One row of words at a time, each a [BLOCK_N] vector (a thread holds several
    columns, so the x work of a row -- eight loads and sums -- is shared by them); every
    row's dot adds into one accumulator per column, and a chunk's group scale and bias
    are applied once at the chunk's end (a chunk's rows lie in one group)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    mask_n = offs_n < N
    mask_m = offs_m < M
    x_rows = x_ptr + offs_m[:, None] * stride_xm
    part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c in tl.static_range(CHUNKS):
        first = (pid_k * CHUNKS + c) * ROWS
        a = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        offset = tl.zeros((BLOCK_M, 1), dtype=tl.float32)    # sum_k x_k 2**(23 - P_k)
        plain = tl.zeros((BLOCK_M, 1), dtype=tl.float32)     # sum_k x_k
        for i in tl.static_range(ROWS):
            r = first + i
            if EVEN_N:
                w = tl.load(qw_ptr + r * stride_qk + offs_n, eviction_policy="evict_first")
            else:
                w = tl.load(qw_ptr + r * stride_qk + offs_n, mask=mask_n, other=0,
                            eviction_policy="evict_first")
            x_at = x_rows + r * 8
            x0 = tl.load(x_at + 0, mask=mask_m[:, None], other=0.0).to(tl.float32)
            x1 = tl.load(x_at + 1, mask=mask_m[:, None], other=0.0).to(tl.float32)
            x2 = tl.load(x_at + 2, mask=mask_m[:, None], other=0.0).to(tl.float32)
            x3 = tl.load(x_at + 3, mask=mask_m[:, None], other=0.0).to(tl.float32)
            x4 = tl.load(x_at + 4, mask=mask_m[:, None], other=0.0).to(tl.float32)
            x5 = tl.load(x_at + 5, mask=mask_m[:, None], other=0.0).to(tl.float32)
            x6 = tl.load(x_at + 6, mask=mask_m[:, None], other=0.0).to(tl.float32)
            x7 = tl.load(x_at + 7, mask=mask_m[:, None], other=0.0).to(tl.float32)
            a = _word_dot(a, w[None, :], x0, x1, x2, x3, x4, x5, x6, x7, PTX)
            at12 = x0 + x1 + x3 + x5 + x7
            at16 = x2 + x4 + x6
            offset += at12 * 2048.0 + at16 * 128.0
            plain += at12 + at16
        at = (first * 8 // GROUP_SIZE) * stride_sg + offs_n
        scale = tl.load(scale_ptr + at, mask=mask_n, other=0.0).to(tl.float32)
        bias = tl.load(bias_ptr + at, mask=mask_n, other=0.0).to(tl.float32)
        part += (a - offset) * scale[None, :] + plain * bias[None, :]
    sum_splits(part, out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
                ws_ptr + offs_m[:, None] * stride_wm + offs_n[None, :],
                mask_m[:, None] & mask_n[None, :], count_ptr + pid_n, tl.num_programs(1))


# (BLOCK_N, ROWS, CHUNKS, num_warps): a thread holds BLOCK_N / (32 * num_warps) columns
# (x's work of a row is shared by them); ROWS * CHUNKS rows of words per program (more
# per program: fewer partial sums into the workspace, fewer programs to keep SMs busy).
# Two configs: the autotuner compiles each one for every row count (BLOCK_M 1, 2, 4)
# before the first request, and the 17 tried before took 62 s at one row and 160 s at
# four (call 33) -- those of CHUNKS > 1 compiled in 15-147 s each. On the H200 (call 35,
# benchmarks/gpu/gemv_configs.py, each config alone) these two are within 3% of the best
# of the 17 at all five Llama-3-8B shapes (projections and a 4-bit head) at 1, 2 and 4
# rows, and compile in 15 s of the 17's 403. s24 call 98 (benchmarks/results/
# gpu-h200-2026-12-04s24) added a third, one warp of 256 columns (more programs per SM):
# at one row 1.0-4.4% faster than the better of the two on all five shapes (4096x4096:
# 6.66 against 6.89 us; the 4-bit head: 82.96 against 86.76), the others kept at two and
# four rows (there it loses up to 14%); finer K splits (ROWS 1-2) lost 1.2-2.6x.
_CONFIGS = ((512, 8, 1, 2), (1024, 8, 1, 8), (256, 8, 1, 1))
# groups of 32 K rows (GGUF's blocks) hold 4 rows of words: ROWS=8 cannot lie in one
_SMALL_GROUP_CONFIGS = ((1024, 4, 1, 4),)
_TUNED: dict[int, object] = {}
_INTERPRETED_CHUNKS = 1   # (a test sets 2: chunks of two groups in one program)


def _whole_programs(configs, named_args, **kwargs):
    """The configs whose programs' rows tile K's rows exactly (CHUNKS=1 configs always do:
    a chunk divides a group and the groups tile K)."""
    rows = named_args["K"] // 8
    return [c for c in configs if rows % (c.kwargs["ROWS"] * c.kwargs["CHUNKS"]) == 0]


def autotuned(kernel, configs: list):
    """``kernel`` (with N, K, M_BUCKET, BLOCK_N, ROWS, CHUNKS, EVEN_N) autotuned over
    ``configs`` per row bucket and shape, EVEN_N from N, programs that tile K only."""
    even = triton.heuristics({"EVEN_N": lambda a: a["N"] % a["BLOCK_N"] == 0})
    return triton.autotune(configs=configs, key=["M_BUCKET", "N", "K"],
                           prune_configs_by={"early_config_prune": _whole_programs})(
        even(kernel))


def configs_for(group_size: int) -> list[tuple[int, int, int, int]]:
    """The configs whose rows of words lie in one group of ``group_size`` K rows."""
    fits = lambda configs: [c for c in configs if (group_size // 8) % c[1] == 0]  # noqa: E731
    return fits(_CONFIGS) or fits(_SMALL_GROUP_CONFIGS)


def _tuned(group_size: int):
    """The kernel autotuned over the configs whose K tile lies in one group."""
    tuned = _TUNED.get(group_size)
    if tuned is None:
        tuned = autotuned(_gemv_kernel, [
            triton.Config({"BLOCK_N": n, "ROWS": r, "CHUNKS": c}, num_warps=w, num_stages=1)
            for n, r, c, w in configs_for(group_size)])
        _TUNED[group_size] = tuned
    return tuned


def unsupported_reason(x: torch.Tensor, k: int, group_size: int, bits: int,
                       has_g_idx: bool) -> str | None:
    """Why this kernel cannot take the call (None: it can)."""
    return refusal(x, k, group_size, bits, has_g_idx, MAX_M, 32)


def refusal(x: torch.Tensor, k: int, group_size: int, bits: int, has_g_idx: bool,
            max_m: int, group_multiple: int) -> str | None:
    """What a GEMV of at most ``max_m`` fp16/bf16 rows, 4-bit codes, no g_idx and groups
    a multiple of ``group_multiple`` refuses in this call (None: nothing)."""
    if bits != 4:
        return f"{bits}-bit codes (4 only)"
    if has_g_idx:
        return "act-order g_idx"
    if x.dtype not in DTYPES:
        return f"{x.dtype} activations (fp16, bf16 only)"
    if not 1 <= x.shape[0] <= max_m:
        return f"{x.shape[0]} rows (1..{max_m})"
    if group_size % group_multiple or k % group_size:
        return (f"group size {group_size} with K={k} (a multiple of {group_multiple} that "
                "divides K)")
    return None


def launch(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
           biases: torch.Tensor, group_size: int,
           config: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """x [M, K] @ W -> new [M, N] in x's dtype, for arguments w4a16_gemm has checked and
    ``unsupported_reason`` takes (call ``w4a16_gemm(..., variant="gemv")``, which does both).
    ``config``: (BLOCK_N, ROWS, CHUNKS, num_warps) instead of the autotuner's choice (the
    config benchmark, benchmarks/gpu/gemv_configs.py); its ROWS * CHUNKS must divide K / 8
    and ROWS the group's rows of words."""
    m, k = x.shape
    n = qweight.shape[1]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if n == 0:
        return out
    ws, counts = workspace(x.device, n)
    kwargs = dict(GROUP_SIZE=group_size, BLOCK_M=triton.next_power_of_2(m),
                  PTX=not is_interpreted(_gemv_kernel))
    tuned = None if is_interpreted(_gemv_kernel) else _tuned(group_size)
    if is_interpreted(_gemv_kernel) and config is None:   # small fixed tiles; several
        config = (32, 2, _INTERPRETED_CHUNKS, 4)          # programs sum
    if config is not None:
        block_n, rows, chunks, warps = config
        if (group_size // 8) % rows or (k // 8) % (rows * chunks):
            raise ValueError(f"gemv config {config}: ROWS={rows} must divide a group's "
                             f"{group_size // 8} rows of words and ROWS*CHUNKS K's {k // 8}")
        kwargs.update(BLOCK_N=block_n, ROWS=rows, CHUNKS=chunks, EVEN_N=n % block_n == 0)
        if not is_interpreted(_gemv_kernel):
            kwargs.update(num_warps=warps, num_stages=1)
        tuned = None
    kernel = kernel_for(_gemv_kernel, x.device, tuned=tuned)

    def grid(meta):
        check_tiles(triton.cdiv(n, meta["BLOCK_N"]), counts)
        return (triton.cdiv(n, meta["BLOCK_N"]), k // 8 // (meta["ROWS"] * meta["CHUNKS"]))
    kernel[grid](x, qweight, scales, biases, out, ws, counts, m, n, k, kwargs["BLOCK_M"],
                 x.stride(0), qweight.stride(0), scales.stride(0), out.stride(0),
                 ws.stride(0), **kwargs)
    return out
