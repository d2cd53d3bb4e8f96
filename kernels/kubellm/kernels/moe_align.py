"""Sort (token, expert) pairs by expert into blocks of ``block_m`` rows, for the grouped
GEMMs of ``fused_moe``: every block holds pairs of one expert only (padded with a
sentinel), so one program multiplies one block by one expert's weights.

Three small Triton kernels, all on the device: per-chunk expert histograms; one program
that turns them into each chunk's offset inside each expert's run, the experts' padded
starts, the expert of every block and the sentinel fill; then every pair written to its
row. The sizes are static (the most padding any routing can need) and nothing is read
back on the host, so a decode step that calls this can be captured in a CUDA graph; the
GEMM's programs past ``num_padded`` return at once. (The same in torch ops took ~40
kernels per layer: milliseconds of a decode step at 48 layers.)

Exact (integer) op: within an expert's run pairs keep their order. The reference
``moe_align_block_size_ref`` is a plain Python loop.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import check_tensor, kernel_for

INDEX_DTYPES = (torch.int32, torch.int64)
_TILE_ELEMENTS = 8192   # one-hot / compare tiles per program: [rows, experts + 1]


@triton.jit
def _local_ids(topk_ids_ptr, pairs, num_pairs, expert_start, num_experts):
    """This rank's expert of each pair; ``num_experts`` for another rank's (or none)."""
    ok = pairs < num_pairs
    ids = tl.load(topk_ids_ptr + pairs, mask=ok, other=0).to(tl.int32) - expert_start
    mine = ok & (ids >= 0) & (ids < num_experts)
    return tl.where(mine, ids, num_experts), mine


@triton.jit
def _count_kernel(
    topk_ids_ptr,   # [P] pairs' global expert ids
    counts_ptr,     # [num_chunks, E_PAD] int32 out
    num_pairs, expert_start, num_experts,
    CHUNK: tl.constexpr, E_PAD: tl.constexpr,
):
    chunk = tl.program_id(0)
    pairs = chunk * CHUNK + tl.arange(0, CHUNK)
    ids, _ = _local_ids(topk_ids_ptr, pairs, num_pairs, expert_start, num_experts)
    onehot = (ids[:, None] == tl.arange(0, E_PAD)[None, :]).to(tl.int32)
    tl.store(counts_ptr + chunk * E_PAD + tl.arange(0, E_PAD), tl.sum(onehot, axis=0))


@triton.jit
def _layout_kernel(
    counts_ptr,          # [num_chunks, E_PAD] in: counts; out: each chunk's offset in a run
    starts_ptr,          # [E_PAD] int32 out: first row of each expert's run
    sorted_pair_ids_ptr,  # [max_rows] int32 out: every row set to the sentinel here
    block_expert_ids_ptr,  # [max_blocks] int32 out
    num_padded_ptr,      # [1] int32 out
    num_chunks, num_experts, num_pairs, max_rows, max_blocks,
    BLOCK_M: tl.constexpr, E_PAD: tl.constexpr, CHUNKS_PER_TILE: tl.constexpr,
    BLOCKS_PER_TILE: tl.constexpr, FILL: tl.constexpr,
):
    experts = tl.arange(0, E_PAD)
    running = tl.zeros([E_PAD], tl.int32)
    for c0 in range(0, num_chunks, CHUNKS_PER_TILE):     # exclusive scan over chunks
        chunks = c0 + tl.arange(0, CHUNKS_PER_TILE)
        ptrs = counts_ptr + chunks[:, None] * E_PAD + experts[None, :]
        ok = (chunks < num_chunks)[:, None]
        counts = tl.load(ptrs, mask=ok, other=0)
        tl.store(ptrs, running[None, :] + tl.cumsum(counts, axis=0) - counts, mask=ok)
        running += tl.sum(counts, axis=0)
    is_expert = experts < num_experts
    padded = tl.where(is_expert, (running + BLOCK_M - 1) // BLOCK_M * BLOCK_M, 0)
    ends = tl.cumsum(padded, axis=0)
    tl.store(starts_ptr + experts, ends - padded)
    tl.store(num_padded_ptr, tl.sum(padded, axis=0))
    for r0 in range(0, max_rows, FILL):
        rows = r0 + tl.arange(0, FILL)
        tl.store(sorted_pair_ids_ptr + rows, tl.full([FILL], 0, tl.int32) + num_pairs,
                 mask=rows < max_rows)
    # a block's expert: how many experts' runs end at or before its first row
    ends = tl.where(is_expert, ends, 2147483647)
    for b0 in range(0, max_blocks, BLOCKS_PER_TILE):
        blocks = b0 + tl.arange(0, BLOCKS_PER_TILE)
        before = (ends[None, :] <= (blocks * BLOCK_M)[:, None]).to(tl.int32)
        expert = tl.minimum(tl.sum(before, axis=1), num_experts - 1)
        tl.store(block_expert_ids_ptr + blocks, expert, mask=blocks < max_blocks)


@triton.jit
def _scatter_kernel(
    topk_ids_ptr, counts_ptr, starts_ptr,   # counts_ptr holds the chunk offsets now
    sorted_pair_ids_ptr,                    # [max_rows] int32 out
    num_pairs, expert_start, num_experts,
    CHUNK: tl.constexpr, E_PAD: tl.constexpr,
):
    chunk = tl.program_id(0)
    pairs = chunk * CHUNK + tl.arange(0, CHUNK)
    ids, mine = _local_ids(topk_ids_ptr, pairs, num_pairs, expert_start, num_experts)
    onehot = (ids[:, None] == tl.arange(0, E_PAD)[None, :]).to(tl.int32)
    rank = tl.sum(onehot * tl.cumsum(onehot, axis=0), axis=1) - 1   # among the chunk's
    row = tl.load(starts_ptr + ids) + tl.load(counts_ptr + chunk * E_PAD + ids) + rank
    tl.store(sorted_pair_ids_ptr + row, pairs, mask=mine)


def max_padded_rows(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Rows the padded layout can need: each expert that gets any pair (at most
    min(E, pairs) of them) rounds its count up to a multiple of ``block_m``."""
    return num_pairs + min(num_experts, num_pairs) * (block_m - 1)


def moe_align_block_size(topk_ids: torch.Tensor, num_experts: int, block_m: int,
                         expert_start: int = 0):
    """topk_ids [T, K] (global expert ids, int32/int64, contiguous) ->

    - ``sorted_pair_ids`` [max_padded_rows] int32: pair index ``t * K + k`` in expert
      order, each expert's run padded to a multiple of ``block_m`` with ``T * K``;
    - ``block_expert_ids`` [max_padded_rows / block_m] int32: the local expert of each
      block (blocks past ``num_padded`` hold an arbitrary valid expert id);
    - ``num_padded`` [1] int32: rows in use (a multiple of ``block_m``).

    Only experts ``expert_start .. expert_start + num_experts - 1`` are this rank's
    (expert parallelism); pairs routed elsewhere are left out of every block.
    """
    check_tensor("topk_ids", topk_ids, 2, INDEX_DTYPES)
    if not topk_ids.is_contiguous():
        raise ValueError(f"topk_ids must be contiguous, got strides {topk_ids.stride()}")
    if not isinstance(block_m, int) or block_m < 1 or block_m & (block_m - 1):
        raise ValueError(f"block_m must be a power of two, got {block_m!r}")
    if num_experts < 1:
        raise ValueError(f"num_experts must be positive, got {num_experts}")
    device = topk_ids.device
    num_pairs = topk_ids.numel()
    max_rows = max_padded_rows(num_pairs, num_experts, block_m)
    max_blocks = -(-max_rows // block_m)
    sorted_ids = torch.empty(max_rows, dtype=torch.int32, device=device)
    block_experts = torch.empty(max_blocks, dtype=torch.int32, device=device)
    num_padded = torch.zeros(1, dtype=torch.int32, device=device)
    if num_pairs == 0:
        return sorted_ids, block_experts, num_padded
    e_pad = triton.next_power_of_2(num_experts + 1)    # + the bin of others' pairs
    per_tile = max(16, _TILE_ELEMENTS // e_pad)
    chunk = min(per_tile, max(16, triton.next_power_of_2(num_pairs)))
    num_chunks = triton.cdiv(num_pairs, chunk)
    counts = torch.empty((num_chunks, e_pad), dtype=torch.int32, device=device)
    starts = torch.empty(e_pad, dtype=torch.int32, device=device)
    flat = topk_ids.view(-1)
    kernel_for(_count_kernel, device)[(num_chunks,)](
        flat, counts, num_pairs, expert_start, num_experts, CHUNK=chunk, E_PAD=e_pad)
    kernel_for(_layout_kernel, device)[(1,)](
        counts, starts, sorted_ids, block_experts, num_padded,
        num_chunks, num_experts, num_pairs, max_rows, max_blocks,
        BLOCK_M=block_m, E_PAD=e_pad, CHUNKS_PER_TILE=per_tile, BLOCKS_PER_TILE=per_tile,
        FILL=4096)
    kernel_for(_scatter_kernel, device)[(num_chunks,)](
        flat, counts, starts, sorted_ids, num_pairs, expert_start, num_experts,
        CHUNK=chunk, E_PAD=e_pad)
    return sorted_ids, block_experts, num_padded


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
