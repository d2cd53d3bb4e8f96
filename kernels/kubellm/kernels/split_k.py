"""Split-K sums for kernels that spread K over programs (the W4A16 GEMM's decode tiling,
the W4A16 GEMV): each program adds its fp32 partial output tile into a per-N workspace
and counts itself in; the last one in writes the output and leaves the workspace zero,
so a call is one kernel (no zeros before, no cast after).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

# rows of every workspace: the most rows a split-K call takes (w4a16_gemm's decode)
MAX_M = 64


@triton.jit
def sum_splits(part, out_at, ws_at, mask, count_at, num_splits):
    """Add this program's fp32 partial tile into the workspace tile, then count the
    program in; the one that counts last (num_splits - 1 before it) writes the sum to
    the output in its dtype and zeros the workspace tile and the count for the next call.

    The partial sums need no order among themselves (relaxed adds), but must all be in
    the workspace before the last program reads it: the barrier puts every thread's adds
    before the count (one thread makes it), whose release publishes them; its acquire
    in the last program, and loads that skip L1 (.cg: L1 is not coherent), see them.
    The second barrier keeps a thread's zeros from landing before another thread that
    holds a copy of the same element has loaded it. No program waits for another, so the
    kernel cannot hang whatever order the programs run in (the interpreter runs them one
    after another)."""
    tl.atomic_add(ws_at, part, mask=mask, sem="relaxed")
    tl.debug_barrier()
    if tl.atomic_add(count_at, 1, sem="acq_rel") == num_splits - 1:
        total = tl.load(ws_at, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(out_at, total.to(out_at.dtype.element_ty), mask=mask)
        tl.debug_barrier()
        tl.store(ws_at, tl.zeros_like(total), mask=mask)
        tl.store(count_at, 0)


# Split-K workspaces, one per (device, N): fp32 [MAX_M, N] and an int32 count per
# output tile, allocated zeroed on a call with a new N and left zero by every call. One per
# N rather than one per device grown to the largest N: a buffer is never replaced, so a
# CUDA graph captured earlier can never hold a pointer to a freed one (a grown buffer
# would free the old one under the graphs captured with it). MAX_M rows, whatever
# M the first call had, so the engine's eager warm-up at its first batch size allocates
# what every later size and its graph capture need. Llama-3-8B: N = 6144, 4096, 28672,
# 10 MB (a 4-bit lm_head adds 33 MB). Calls on one device must not overlap (one stream):
# two at once with the same N would share a workspace.
_WORKSPACES: dict[tuple[torch.device, int, int], tuple[torch.Tensor, torch.Tensor]] = {}
_MIN_TILE = 16   # the smallest BLOCK_M and BLOCK_N of any config: sizes the counts


def _is_capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def workspace(device: torch.device, n: int,
              rows: int = MAX_M) -> tuple[torch.Tensor, torch.Tensor]:
    """The (sums [rows, n] fp32, counts int32) of split-K calls with N=n and at most
    ``rows`` rows (dense_gemm's decode calls take more than the W4A16 kernels' MAX_M)."""
    ws = _WORKSPACES.get((device, n, rows))
    if ws is None:
        if _is_capturing(device):   # an allocation here would belong to the graph's pool
            raise RuntimeError(
                f"split-K: first call with N={n} on {device} during CUDA graph "
                "capture; its split-K workspace must be allocated by an eager call first "
                "(run the same shapes once before capturing)")
        tiles = triton.cdiv(rows, _MIN_TILE) * triton.cdiv(n, _MIN_TILE)
        ws = (torch.zeros((rows, n), dtype=torch.float32, device=device),
              torch.zeros(tiles, dtype=torch.int32, device=device))
        _WORKSPACES[(device, n, rows)] = ws
    return ws


def check_tiles(num_tiles: int, counts: torch.Tensor):
    if num_tiles > counts.numel():   # a config with tiles below _MIN_TILE
        raise RuntimeError(f"split-K: {num_tiles} output tiles, but counts for "
                           f"{counts.numel()} (_MIN_TILE is {_MIN_TILE})")
