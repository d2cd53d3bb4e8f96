"""The fused MoE kernel on one layer's shape: block sizes swept per batch bucket (the
winners form the table kubellm.kernels.fused_moe_configs reads), then the tuned kernel
against a per-expert loop of torch matmuls (what transformers runs) in the same run.

Called by benchmarks/gpu/moe.py; every figure is a median of CUDA-event timings
(triton's do_bench) on the GPU, of wall-clock repeats on the CPU (--smoke).
"""
from __future__ import annotations

import time

import torch

from kubellm.kernels import fused_moe as fm
from kubellm.kernels.fused_moe_configs import MoeConfig, Tile, default_config, shape_key
from kubellm.kernels.moe_align import moe_align_block_size

# (block_n, block_k, group_m, num_warps, num_stages): shapes that win on Hopper for
# skinny-K grouped GEMMs (vLLM's and SGLang's published H100/H200 tables span these)
TILES = [(64, 64, 1, 4, 3), (128, 64, 1, 4, 3), (64, 128, 1, 4, 3), (128, 128, 1, 8, 3),
         (128, 64, 8, 8, 4)]
SMOKE_TILES = [(16, 16, 1, 4, 3), (32, 32, 1, 4, 3)]


def block_ms_for(num_tokens: int, smoke: bool) -> list[int]:
    if smoke:
        return [16]
    if num_tokens <= 64:
        return [16, 32]
    if num_tokens <= 512:
        return [16, 32, 64]
    return [64, 128]


def _sig(x: float) -> float:
    """Significant digits, not decimals: a slow CPU's figures must not round to 0."""
    return float(f"{x:.4g}")


def median_ms(fn, device: str) -> float:
    if device == "cuda":
        from triton.testing import do_bench
        return do_bench(fn, warmup=10, rep=40, return_mode="median")
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[1]


class Layer:
    """One MoE layer's weights and a random routing of ``num_tokens`` tokens."""

    def __init__(self, experts: int, top_k: int, hidden: int, inter: int, dtype, device):
        gen = torch.Generator(device=device).manual_seed(0)
        self.w13 = (torch.randn(experts, 2 * inter, hidden, device=device, generator=gen)
                    * hidden ** -0.5).to(dtype)
        self.w2 = (torch.randn(experts, hidden, inter, device=device, generator=gen)
                   * inter ** -0.5).to(dtype)
        self.experts, self.top_k, self.hidden, self.inter = experts, top_k, hidden, inter
        self.dtype, self.device = dtype, device

    def inputs(self, num_tokens: int):
        gen = torch.Generator(device=self.device).manual_seed(num_tokens)
        x = torch.randn(num_tokens, self.hidden, device=self.device, generator=gen).to(self.dtype)
        scores = torch.rand(num_tokens, self.experts, device=self.device, generator=gen)
        weights, ids = scores.topk(self.top_k, dim=-1)
        return x, (weights / weights.sum(-1, keepdim=True)).float(), ids

    def key(self) -> str:
        return shape_key(self.experts, self.hidden, self.inter, self.top_k, self.dtype)


def _ms_or_inf(fn, device) -> float:
    """A tile the GPU cannot run (more shared memory than it has: the H200's 227 KiB were
    exceeded by 128x128 tiles at 3 stages) is never the best, rather than the end of the
    sweep."""
    try:
        return median_ms(fn, device)
    except Exception as exc:  # triton's OutOfResources, or a launch it refuses
        if "out of resource" not in str(exc).lower():
            raise
        return float("inf")


def _time_gemms(layer: Layer, num_tokens: int, block_m: int, gate_up_tile: Tile,
                down_tile: Tile) -> tuple[float, float]:
    """Each GEMM alone (ms), on one routing sorted once for ``block_m``."""
    x, weights, ids = layer.inputs(num_tokens)
    sorted_ids, blocks, padded = moe_align_block_size(ids, layer.experts, block_m)
    pairs = ids.numel()
    act = torch.empty(pairs, layer.inter, dtype=layer.dtype, device=layer.device)
    out = torch.empty(pairs, layer.hidden, dtype=layer.dtype, device=layer.device)
    flat = weights.reshape(-1)
    gate_up = _ms_or_inf(lambda: fm._launch_gemm(
        x, layer.w13, act, flat, sorted_ids, blocks, padded, layer.inter, layer.hidden,
        layer.top_k, True, False, block_m, gate_up_tile), layer.device)
    down = _ms_or_inf(lambda: fm._launch_gemm(
        act, layer.w2, out, flat, sorted_ids, blocks, padded, layer.hidden, layer.inter,
        1, False, True, block_m, down_tile), layer.device)
    return gate_up, down


def sweep(layer: Layer, buckets: list[int], smoke: bool = False, deadline: float | None = None,
          log=print) -> dict:
    """{bucket: best config as a dict, with its time} over TILES x block_m choices.
    Buckets not reached by ``deadline`` (time.monotonic()) are left out: steps of those
    sizes use the nearest larger bucket's config."""
    best = {}
    tiles = [Tile(*t) for t in (SMOKE_TILES if smoke else TILES)]
    for num_tokens in buckets:
        if deadline is not None and time.monotonic() > deadline:
            log(f"tune: out of time before T={num_tokens}")
            break
        candidates = []
        for block_m in block_ms_for(num_tokens, smoke):
            timed = [(tile, *_time_gemms(layer, num_tokens, block_m, tile, tile))
                     for tile in tiles]
            up_tile, up_ms, _ = min(timed, key=lambda t: t[1])
            down_tile, _, down_ms = min(timed, key=lambda t: t[2])
            candidates.append((up_ms + down_ms, MoeConfig(block_m, up_tile, down_tile)))
        ms, config = min(candidates, key=lambda c: c[0])
        default = default_config(num_tokens, layer.top_k, layer.experts, layer.hidden,
                                 layer.inter, layer.dtype, interpreted=smoke)
        default_ms = sum(_time_gemms(layer, num_tokens, default.block_m, default.gate_up,
                                     default.down))
        best[str(num_tokens)] = {**config.to_dict(), "gemms_ms": _sig(ms),
                                 "default_gemms_ms": _sig(default_ms)}
        log(f"tune T={num_tokens}: {ms:.3f} ms (default {default_ms:.3f}) {config}")
    return best


def fused_vs_loop(layer: Layer, token_counts: list[int], log=print) -> list[dict]:
    """The whole fused_moe call (sorting included) against the per-expert torch loop of
    the runtime's CPU path, in the layer's dtype; bytes are the weights of the experts
    the step touches (each read once), FLOPs 3 matmuls per (token, expert) pair."""
    from kubellm.runtime.layers.moe import per_expert_loop
    rows = []
    for num_tokens in token_counts:
        x, weights, ids = layer.inputs(num_tokens)
        fused = median_ms(lambda: fm.fused_moe(x, layer.w13, layer.w2, weights, ids),
                          layer.device)
        loop = median_ms(lambda: per_expert_loop(x, layer.w13, layer.w2, weights, ids),
                         layer.device)
        touched = int(torch.unique(ids).numel())
        weight_bytes = touched * 3 * layer.hidden * layer.inter * layer.w13.element_size()
        flops = 2 * 3 * ids.numel() * layer.hidden * layer.inter
        row = {"tokens": num_tokens, "fused_ms": _sig(fused), "loop_ms": _sig(loop),
               "speedup": _sig(loop / fused), "experts_touched": touched,
               "fused_weight_tb_s": _sig(weight_bytes / fused / 1e9),
               "fused_tflops": _sig(flops / fused / 1e9)}
        rows.append(row)
        log(f"fused vs loop: {row}")
    return rows
