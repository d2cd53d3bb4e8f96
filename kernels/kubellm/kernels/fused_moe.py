"""Fused mixture-of-experts MLP: out[t] = sum_k w[t,k] * down_e(silu(gate_e(x_t)) * up_e(x_t))
with e = topk_ids[t, k], as two grouped GEMMs over all experts at once.

The (token, expert) pairs are sorted by expert into blocks of BLOCK_M rows
(``moe_align``); one program multiplies one block by one expert's weight tile:

1. gate+up: rows of ``x`` gathered by token, times that expert's gate and up rows (two
   accumulators), SiLU-and-mul in the epilogue -> ``act`` [T*K, I] (rounded once to the
   input dtype);
2. down: rows of ``act`` times the expert's down projection, the pair's top-k weight
   applied in the epilogue -> ``out_pairs`` [T*K, H]; the K pairs of each token are then
   summed (one reduction, deterministic: no atomics).

Accumulation in fp32. Tolerances against ``fused_moe_ref`` (per-expert torch matmuls in
fp32, the activation rounded to the dtype as here): fp32 atol=rtol=1e-4 (the sums run in
another order), fp16 2e-3, bf16 2e-2 (one rounding of ``act`` that may fall on the other
side, amplified by the down projection).

Block sizes come from ``fused_moe_configs`` (a table measured per batch bucket on the
H200, with defaults that are correct for any shape); every launch takes one config.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import (FLOAT_DTYPES, check_contiguous, check_shape,
                                     check_tensor, is_interpreted, kernel_for)
from kubellm.kernels.fused_moe_configs import MoeConfig, choose_config
from kubellm.kernels.moe_align import INDEX_DTYPES, moe_align_block_size

TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-3, 2e-3),
              torch.bfloat16: (2e-2, 2e-2)}


@triton.jit
def _fused_moe_gemm_kernel(
    a_ptr,              # [rows of A, K]: x [T, H] (GATED) or act [T*TOP_K, I]
    b_ptr,              # [E, N_B, K]: w13 [E, 2N, H] (GATED) or w2 [E, H, I]
    c_ptr,              # [T*TOP_K, N]
    topk_weights_ptr,   # [T*TOP_K] fp32 (read when MUL_WEIGHT)
    sorted_pair_ids_ptr,  # [max_rows] int32, pair t*TOP_K+k or num_pairs (padding)
    block_expert_ids_ptr,  # [max_rows / BLOCK_M] int32
    num_padded_ptr,     # [1] int32
    N, K, num_pairs, up_offset,   # up rows start at up_offset in B (GATED)
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
    A_ROWS_PER_PAIR: tl.constexpr,  # TOP_K: A is indexed by token; 1: by pair
    GATED: tl.constexpr,
    MUL_WEIGHT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_FP32: tl.constexpr,       # interpreter only: numpy cannot multiply bf16
    DOT_PRECISION: tl.constexpr,
):
    # grouped launch order: GROUP_M row blocks share each column tile while it is in L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(tl.load(num_padded_ptr), BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * num_pid_n)
    first_m = group * GROUP_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
    if group_size <= 0:
        return  # a block past the padded rows in use
    pid_m = first_m + (pid % (GROUP_M * num_pid_n)) % group_size
    pid_n = (pid % (GROUP_M * num_pid_n)) // group_size
    if pid_n >= num_pid_n:
        return  # the grid is sized for the most blocks; this group has fewer

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(sorted_pair_ids_ptr + rows)
    row_ok = pairs < num_pairs
    a_rows = (pairs // A_ROWS_PER_PAIR).to(tl.int64)
    expert = tl.load(block_expert_ids_ptr + pid_m).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + cols[None, :] * stride_bn + ks[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = ks < K - k0
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if DOT_FP32:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        if GATED:
            b_up = tl.load(b_ptrs + up_offset * stride_bn,
                           mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            if DOT_FP32:
                b_up = b_up.to(tl.float32)
            acc_up = tl.dot(a, b_up, acc_up, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if GATED:
        acc = acc / (1.0 + tl.exp(-acc)) * acc_up
    if MUL_WEIGHT:
        acc = acc * tl.load(topk_weights_ptr + pairs, mask=row_ok, other=0.0)[:, None]
    c_ptrs = c_ptr + pairs.to(tl.int64)[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _launch_gemm(a, b, c, topk_weights, sorted_pair_ids, block_expert_ids, num_padded,
                 n: int, k: int, a_rows_per_pair: int, gated: bool, mul_weight: bool,
                 block_m: int, tile) -> None:
    max_blocks = sorted_pair_ids.numel() // block_m
    grid = (max_blocks * triton.cdiv(n, tile.block_n),)
    interpreted = is_interpreted(_fused_moe_gemm_kernel)
    extra = {} if interpreted else {"num_warps": tile.num_warps, "num_stages": tile.num_stages}
    kernel_for(_fused_moe_gemm_kernel, a.device)[grid](
        a, b, c, topk_weights, sorted_pair_ids, block_expert_ids, num_padded,
        n, k, topk_weights.numel(), n if gated else 0,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2),
        c.stride(0), c.stride(1),
        A_ROWS_PER_PAIR=a_rows_per_pair, GATED=gated, MUL_WEIGHT=mul_weight,
        BLOCK_M=block_m, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k, GROUP_M=tile.group_m,
        DOT_FP32=interpreted and a.dtype == torch.bfloat16,
        DOT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
        **extra)


def _check_inputs(x, w13, w2, topk_weights, topk_ids, expert_start, num_global_experts):
    check_tensor("x", x, 2, FLOAT_DTYPES)
    check_contiguous("x", x)
    device, dtype = x.device, x.dtype
    check_tensor("w13", w13, 3, (dtype,), device)
    check_tensor("w2", w2, 3, (dtype,), device)
    num_experts, two_inter, hidden = w13.shape
    if two_inter % 2:
        raise ValueError(f"w13 must stack gate and up rows: dim 1 must be even, got {two_inter}")
    if hidden != x.shape[1]:
        raise ValueError(f"w13 has hidden size {hidden} but x has {x.shape[1]}")
    check_shape("w2", w2, (num_experts, hidden, two_inter // 2))
    check_tensor("topk_ids", topk_ids, 2, INDEX_DTYPES, device)
    check_tensor("topk_weights", topk_weights, 2, (torch.float32,), device)
    check_shape("topk_ids", topk_ids, (x.shape[0], topk_ids.shape[1]))
    check_shape("topk_weights", topk_weights, tuple(topk_ids.shape))
    if not 0 <= expert_start <= num_global_experts - num_experts:
        raise ValueError(f"experts {expert_start}..{expert_start + num_experts - 1} are not "
                         f"within the {num_global_experts} experts")


def fused_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor, expert_start: int = 0,
              num_global_experts: int | None = None,
              config: MoeConfig | None = None) -> torch.Tensor:
    """x [T, H]; w13 [E, 2I, H] (gate rows then up rows of each expert); w2 [E, H, I];
    topk_weights [T, K] fp32; topk_ids [T, K] global expert ids -> out [T, H] in x's
    dtype. With expert parallelism this rank holds experts ``expert_start ..
    expert_start + E - 1`` of ``num_global_experts``; pairs routed to others add 0 (the
    caller sums the ranks' outputs). ``config`` forces block sizes (tuning, tests)."""
    num_experts = w13.shape[0] if w13.dim() == 3 else 0
    num_global_experts = num_global_experts or num_experts
    _check_inputs(x, w13, w2, topk_weights, topk_ids, expert_start, num_global_experts)
    num_tokens, hidden = x.shape
    top_k = topk_ids.shape[1]
    inter = w2.shape[2]
    if num_tokens == 0:
        return torch.zeros_like(x)
    if config is None:
        config = choose_config(num_tokens, top_k, num_experts, hidden, inter, x.dtype,
                               x.device, interpreted=is_interpreted(_fused_moe_gemm_kernel))
    sorted_ids, block_experts, num_padded = moe_align_block_size(
        topk_ids, num_experts, config.block_m, expert_start)
    num_pairs = topk_ids.numel()
    act = torch.empty((num_pairs, inter), dtype=x.dtype, device=x.device)
    weights = topk_weights.reshape(-1)
    _launch_gemm(x, w13, act, weights, sorted_ids, block_experts, num_padded, inter, hidden,
                 top_k, gated=True, mul_weight=False, block_m=config.block_m,
                 tile=config.gate_up)
    # pairs routed to other ranks are written by no block: zeros make them add nothing
    alloc = torch.zeros if num_experts < num_global_experts else torch.empty
    out_pairs = alloc((num_pairs, hidden), dtype=x.dtype, device=x.device)
    _launch_gemm(act, w2, out_pairs, weights, sorted_ids, block_experts, num_padded, hidden,
                 inter, 1, gated=False, mul_weight=True, block_m=config.block_m,
                 tile=config.down)
    return out_pairs.view(num_tokens, top_k, hidden).sum(dim=1)


def fused_moe_ref(x, w13, w2, topk_weights, topk_ids, expert_start: int = 0,
                  num_global_experts: int | None = None) -> torch.Tensor:
    """A loop over experts of plain torch matmuls, in fp32 (the activation rounded to x's
    dtype, as the kernel stores it)."""
    num_tokens, hidden = x.shape
    inter = w2.shape[2]
    out = torch.zeros(num_tokens, hidden, dtype=torch.float32, device=x.device)
    for local in range(w13.shape[0]):
        token, slot = torch.where(topk_ids == local + expert_start)
        if token.numel() == 0:
            continue
        gate_up = x[token].float() @ w13[local].float().T
        act = (torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]).to(x.dtype)
        down = act.float() @ w2[local].float().T
        out.index_add_(0, token, down * topk_weights[token, slot, None])
    return out.to(x.dtype)
