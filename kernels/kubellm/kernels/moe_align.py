"""Sort (token, expert) pairs by expert into blocks of ``block_m`` rows, for the grouped
GEMMs of ``fused_moe``: every block holds pairs of one expert only (padded with a
sentinel), so one program multiplies one block by one expert's weights.

Done with a handful of torch ops on the device, never the host: the sizes are static
(the most padding any routing can need), so a decode step that calls this can be
captured in a CUDA graph, and nothing waits for the device to learn how many blocks
there are (the GEMM's programs past ``num_padded`` return at once).

Exact (integer) op; the reference ``moe_align_block_size_ref`` is a plain Python loop.
"""
from __future__ import annotations

import torch

from kubellm.kernels._launch import check_tensor

INDEX_DTYPES = (torch.int32, torch.int64)


def max_padded_rows(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Rows the padded layout can need: each expert that gets any pair (at most
    min(E, pairs) of them) rounds its count up to a multiple of ``block_m``."""
    return num_pairs + min(num_experts, num_pairs) * (block_m - 1)


def moe_align_block_size(topk_ids: torch.Tensor, num_experts: int, block_m: int,
                         expert_start: int = 0):
    """topk_ids [T, K] (global expert ids, int32/int64) ->

    - ``sorted_pair_ids`` [max_padded_rows] int32: pair index ``t * K + k`` in expert
      order, each expert's run padded to a multiple of ``block_m`` with ``T * K``;
    - ``block_expert_ids`` [max_padded_rows / block_m] int32: the local expert of each
      block (blocks past ``num_padded`` hold an arbitrary valid expert id);
    - ``num_padded`` [1] int32: rows in use (a multiple of ``block_m``).

    Only experts ``expert_start .. expert_start + num_experts - 1`` are this rank's
    (expert parallelism); pairs routed elsewhere are left out of every block.
    """
    check_tensor("topk_ids", topk_ids, 2, INDEX_DTYPES)
    if not isinstance(block_m, int) or block_m < 1 or block_m & (block_m - 1):
        raise ValueError(f"block_m must be a power of two, got {block_m!r}")
    if num_experts < 1:
        raise ValueError(f"num_experts must be positive, got {num_experts}")
    device = topk_ids.device
    num_pairs = topk_ids.numel()
    max_rows = max_padded_rows(num_pairs, num_experts, block_m)
    max_blocks = -(-max_rows // block_m)
    local = topk_ids.reshape(-1).to(torch.int64) - expert_start
    is_mine = (local >= 0) & (local < num_experts)
    local = torch.where(is_mine, local, num_experts)       # bucket E: not this rank's
    counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=device)
    counts.scatter_add_(0, local, torch.ones_like(local))
    padded = (counts + block_m - 1) // block_m * block_m
    padded[num_experts] = 0                                # others' pairs take no rows
    ends = torch.cumsum(padded, 0)
    starts = ends - padded
    # a pair's row: its expert's first row + its rank among that expert's pairs
    order = torch.argsort(local, stable=True)
    sorted_local = local[order]
    first_of_expert = torch.cumsum(counts, 0) - counts
    rank = torch.arange(num_pairs, device=device) - first_of_expert[sorted_local]
    rows = torch.where(sorted_local < num_experts, starts[sorted_local] + rank, max_rows)
    sorted_pair_ids = torch.full((max_rows + 1,), num_pairs, dtype=torch.int32, device=device)
    sorted_pair_ids.scatter_(0, rows, order.to(torch.int32))
    block_starts = torch.arange(max_blocks, device=device) * block_m
    block_expert_ids = torch.searchsorted(ends[:num_experts], block_starts, right=True)
    block_expert_ids = block_expert_ids.clamp_(max=num_experts - 1).to(torch.int32)
    num_padded = ends[num_experts - 1:num_experts].to(torch.int32)
    return sorted_pair_ids[:max_rows], block_expert_ids, num_padded


def moe_align_block_size_ref(topk_ids: torch.Tensor, num_experts: int, block_m: int,
                             expert_start: int = 0):
    """The same layout built pair by pair in Python (tests)."""
    flat = topk_ids.reshape(-1).tolist()
    num_pairs = len(flat)
    max_rows = max_padded_rows(num_pairs, num_experts, block_m)
    sorted_ids, block_experts = [], []
    for expert in range(num_experts):
        mine = [p for p, e in enumerate(flat) if e - expert_start == expert]
        if not mine:
            continue
        pad = -len(mine) % block_m
        sorted_ids += mine + [num_pairs] * pad
        block_experts += [expert] * ((len(mine) + pad) // block_m)
    num_padded = len(sorted_ids)
    sorted_ids += [num_pairs] * (max_rows - num_padded)
    return (torch.tensor(sorted_ids, dtype=torch.int32), block_experts,
            torch.tensor([num_padded], dtype=torch.int32))
