"""Softmax router of a mixture-of-experts block in one kernel: softmax over the experts
(fp32), the top-k experts by probability, optionally renormalized over the k and
rounded to the model dtype (as Qwen-MoE does). Replaces ~8 small torch kernels per
layer (softmax, topk, gather, sum, div, casts): a decode step of a 48-layer MoE runs
hundreds fewer.

Ties between probabilities go to the lower expert id (torch.topk leaves them
unspecified). Tolerances against ``topk_softmax_ref`` (torch): ids exact on inputs
without ties; weights fp32 atol=rtol=1e-6 (exp differs by a few ulps between libraries).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import FLOAT_DTYPES, check_tensor, kernel_for

TOLERANCES = {torch.float32: (1e-6, 1e-6), torch.float16: (1e-6, 1e-6),
              torch.bfloat16: (1e-6, 1e-6)}   # the weights are computed in fp32 for all


@triton.jit
def _topk_softmax_kernel(
    logits_ptr,       # [T, E]
    weights_ptr,      # [T, TOP_K] fp32 out
    ids_ptr,          # [T, TOP_K] int32 out
    round_like_ptr,   # a tensor of the dtype the weights are rounded to (ROUND)
    num_tokens, num_experts, stride_lt,
    TOP_K: tl.constexpr, K_PAD: tl.constexpr, E_PAD: tl.constexpr,
    BLOCK_T: tl.constexpr, RENORMALIZE: tl.constexpr, ROUND: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, E_PAD)
    row_ok = rows < num_tokens
    ok = (cols < num_experts)[None, :] & (rows >= 0)[:, None]
    # rows past the end read zeros (no -inf - -inf) and are never stored
    x = tl.load(logits_ptr + rows.to(tl.int64)[:, None] * stride_lt + cols[None, :],
                mask=row_ok[:, None] & ok, other=0.0).to(tl.float32)
    x = tl.where(ok, x, float("-inf"))
    p = tl.exp(x - tl.max(x, axis=1)[:, None])
    p = p / tl.sum(p, axis=1)[:, None]
    p = tl.where(ok, p, -1.0)          # padding experts: never chosen
    ks = tl.arange(0, K_PAD)
    weights = tl.zeros((BLOCK_T, K_PAD), dtype=tl.float32)
    ids = tl.zeros((BLOCK_T, K_PAD), dtype=tl.int32)
    for k in tl.static_range(TOP_K):
        best = tl.max(p, axis=1)
        # the lowest expert id holding the best probability
        idx = tl.min(tl.where(p == best[:, None], cols[None, :], E_PAD), axis=1)
        weights = tl.where(ks[None, :] == k, best[:, None], weights)
        ids = tl.where(ks[None, :] == k, idx[:, None], ids)
        p = tl.where(cols[None, :] == idx[:, None], -1.0, p)
    if RENORMALIZE:
        weights = weights / tl.sum(tl.where(ks[None, :] < TOP_K, weights, 0.0), axis=1)[:, None]
    if ROUND:
        weights = weights.to(round_like_ptr.dtype.element_ty).to(tl.float32)
    out = rows.to(tl.int64)[:, None] * TOP_K + ks[None, :]
    out_ok = row_ok[:, None] & (ks < TOP_K)[None, :]
    tl.store(weights_ptr + out, weights, mask=out_ok)
    tl.store(ids_ptr + out, ids, mask=out_ok)


def topk_softmax(logits: torch.Tensor, top_k: int, renormalize: bool,
                 round_to: torch.dtype | None = None):
    """logits [T, E] (last dim contiguous) -> (weights [T, k] fp32, ids [T, k] int32)."""
    check_tensor("logits", logits, 2, FLOAT_DTYPES)
    num_tokens, num_experts = logits.shape
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k must be between 1 and the {num_experts} experts, got {top_k}")
    if round_to is not None and round_to not in FLOAT_DTYPES:
        raise TypeError(f"round_to must be a float dtype, got {round_to}")
    weights = torch.empty((num_tokens, top_k), dtype=torch.float32, device=logits.device)
    ids = torch.empty((num_tokens, top_k), dtype=torch.int32, device=logits.device)
    if num_tokens == 0:
        return weights, ids
    e_pad = triton.next_power_of_2(num_experts)
    block_t = max(1, min(16, 4096 // e_pad))
    round_like = torch.empty(0, dtype=round_to or torch.float32, device=logits.device)
    kernel_for(_topk_softmax_kernel, logits.device)[(triton.cdiv(num_tokens, block_t),)](
        logits, weights, ids, round_like, num_tokens, num_experts, logits.stride(0),
        TOP_K=top_k, K_PAD=triton.next_power_of_2(top_k), E_PAD=e_pad, BLOCK_T=block_t,
        RENORMALIZE=renormalize, ROUND=round_to is not None)
    return weights, ids


def topk_softmax_ref(logits: torch.Tensor, top_k: int, renormalize: bool,
                     round_to: torch.dtype | None = None):
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    if round_to is not None:
        weights = weights.to(round_to).float()
    return weights, ids.to(torch.int32)
