"""Does an L2 prefetch issued before a small decode step's attention make the next
projection faster (issue 20's batch-1 ITL, issue 16's batch-1 4-bit decode)?

At one row a Llama-3-8B decode step spends ~0.5 ms of 4.6 in kernels that leave the DRAM
idle (norms, rotary, attention, SiLU), and each projection pays ~3-5 us of ramp-up and
tail beside its read (s10 call 27, s20 call 70). kernels/l2_prefetch.py asks the L2 to
fetch a tensor and returns at once; issued before the attention, the output projection's
weights (32 MB in bf16, 8 MB in 4-bit) could arrive while the attention runs.

Two measurements, each a CUDA graph replayed (median of rounds):
- ``alone``: L2 flushed, [prefetch W], a spin of ~15 us (torch.cuda._sleep), then one
  projection; the projection's time is the graph's less the same graph without it;
- ``layers``: 32 Llama-3-8B layers at one row with the engine's kernels (RMSNorm, QKV,
  paged attention over 512 keys, O, fused add + RMSNorm, gate/up, SiLU-and-mul, down),
  with no prefetch, with O's weights prefetched before the attention (``o``), and with
  also the first MiB of the next projections before each small kernel (``o+heads``).

    python -m benchmarks.gpu.l2_prefetch --out DIR      # DIR/l2_prefetch.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.gpu.w4a16 import significant

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 4096, 32, 8, 128, 14336
CONTEXT, BLOCK = 512, 16
GROUP = 128
SPIN_CYCLES = 30_000          # ~15 us at the H200's ~1.98 GHz
FLUSH_BYTES = 512 << 20


def quantized(k: int, n: int, gen) -> tuple:
    """Random 4-bit codes of the real packing, [K/8, N] words, with scales and biases that
    keep the output the size of the input."""
    codes = torch.randint(-2**31, 2**31 - 1, (k // 8, n), dtype=torch.int32, device="cuda",
                          generator=gen)
    scale = 1 / (4.6 * math.sqrt(k))
    scales = torch.full((k // GROUP, n), scale, device="cuda", dtype=torch.bfloat16)
    return codes, scales, (-7.5 * scales)


class Projection:
    """One linear at one row: bf16 through F.linear ([N, K], as nn.Linear holds it) or
    4-bit through w4a16_gemm's default kernel; ``tensors`` are what it reads."""

    def __init__(self, k: int, n: int, kind: str, gen):
        self.kind = kind
        if kind == "bf16":
            self.weight = (torch.randn(n, k, device="cuda", generator=gen) / math.sqrt(k)
                           ).to(torch.bfloat16)
            self.tensors = (self.weight,)
        else:
            self.quant = quantized(k, n, gen)
            self.tensors = self.quant

    def __call__(self, x):
        if self.kind == "bf16":
            return F.linear(x, self.weight)
        from kubellm.kernels.w4a16_gemm import w4a16_gemm
        return w4a16_gemm(x, *self.quant, GROUP)

    def head(self, num_bytes: int) -> list:
        """Views of the first ``num_bytes`` of each tensor it reads (whole rows)."""
        views = []
        for t in self.tensors:
            row = t[0].numel() * t.element_size()
            views.append(t[:max(1, min(t.shape[0], num_bytes // row))])
        return views


def graph_us(body, rounds: int = 5, replays: int = 20) -> float:
    body()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / replays)
    return statistics.median(times)


def alone(kind: str) -> list[dict]:
    from kubellm.kernels.l2_prefetch import l2_prefetch
    gen = torch.Generator("cuda").manual_seed(0)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    x = torch.randn(1, HIDDEN, device="cuda", generator=gen).to(torch.bfloat16)
    rows = []
    for name, k, n in (("qkv", HIDDEN, 6144), ("o", HIDDEN, HIDDEN),
                       ("down", INTER, HIDDEN)):
        proj = Projection(k, n, kind, gen)
        xin = x if k == HIDDEN else torch.randn(1, k, device="cuda", generator=gen
                                                 ).to(torch.bfloat16)

        def base():
            flush.zero_()
            torch.cuda._sleep(SPIN_CYCLES)

        def plain():
            base()
            proj(xin)

        def prefetched():
            flush.zero_()
            l2_prefetch(*proj.tensors)
            torch.cuda._sleep(SPIN_CYCLES)
            proj(xin)

        def prefetch_only():
            flush.zero_()
            l2_prefetch(*proj.tensors)
            torch.cuda._sleep(SPIN_CYCLES)

        t_base, t_plain = graph_us(base), graph_us(plain)
        t_pf, t_pf_only = graph_us(prefetched), graph_us(prefetch_only)
        num_bytes = sum(t.numel() * t.element_size() for t in proj.tensors)
        row = {"kind": kind, "gemm": name, "mib": significant(num_bytes / 2**20),
               "us_cold": significant(t_plain - t_base),
               "us_after_prefetch": significant(t_pf - t_pf_only),
               "prefetch_launch_us": significant(t_pf_only - t_base)}
        print("alone", json.dumps(row), flush=True)
        rows.append(row)
        del proj
    return rows


def layers(kind: str, num_layers: int = 32) -> dict:
    from kubellm.kernels.activation import silu_and_mul
    from kubellm.kernels.l2_prefetch import l2_prefetch
    from kubellm.kernels.paged_attention import paged_attention
    from kubellm.kernels.rms_norm import fused_add_rms_norm, rms_norm
    gen = torch.Generator("cuda").manual_seed(1)
    blocks = CONTEXT // BLOCK
    stack = []
    for _ in range(num_layers):
        stack.append({
            "qkv": Projection(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM, kind, gen),
            "o": Projection(HIDDEN, HIDDEN, kind, gen),
            "gate_up": Projection(HIDDEN, 2 * INTER, kind, gen),
            "down": Projection(INTER, HIDDEN, kind, gen),
            "k": torch.randn(blocks, BLOCK, KV_HEADS, HEAD_DIM, device="cuda",
                             generator=gen).to(torch.bfloat16),
            "v": torch.randn(blocks, BLOCK, KV_HEADS, HEAD_DIM, device="cuda",
                             generator=gen).to(torch.bfloat16)})
    norm_w = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
    tables = torch.arange(blocks, device="cuda", dtype=torch.int32)[None]
    seq_lens = torch.tensor([CONTEXT], device="cuda", dtype=torch.int32)
    cu = torch.tensor([0, 1], device="cuda", dtype=torch.int32)
    x0 = torch.randn(1, HIDDEN, device="cuda", generator=gen).to(torch.bfloat16)
    scale = HEAD_DIM ** -0.5

    def step(mode: str):
        h, residual = x0.clone(), x0.clone()
        for i, layer in enumerate(stack):
            nxt = stack[(i + 1) % len(stack)]
            if i == 0:
                normed = rms_norm(h, norm_w, 1e-5)
            qkv = layer["qkv"](normed)
            if mode != "none":
                l2_prefetch(*layer["o"].tensors)
            q = qkv[:, :HEADS * HEAD_DIM].view(1, HEADS, HEAD_DIM)
            attn = paged_attention(q, layer["k"], layer["v"], tables, seq_lens, cu, 1, scale,
                                   decode_only=True)
            h = layer["o"](attn.view(1, HIDDEN))
            if mode == "o+heads":
                l2_prefetch(*layer["gate_up"].head(1 << 20))
            normed, residual = fused_add_rms_norm(h, residual, norm_w, 1e-5)
            gu = layer["gate_up"](normed)
            if mode == "o+heads":
                l2_prefetch(*layer["down"].head(1 << 20))
            act = silu_and_mul(gu)
            h = layer["down"](act)
            if mode == "o+heads":
                l2_prefetch(*nxt["qkv"].head(1 << 20))
            normed, residual = fused_add_rms_norm(h, residual, norm_w, 1e-5)
        return normed

    out = {}
    for mode in ("none", "o", "o+heads", "none"):
        us = graph_us(lambda: step(mode)) / num_layers
        key = mode if mode not in out else mode + "_again"
        out[key] = significant(us)
        print("layers", json.dumps({"kind": kind, "mode": key, "us_per_layer": out[key]}),
              flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--kinds", default="bf16,4bit")
    args = ap.parse_args(argv)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "alone": [], "layers": {}}
    for kind in args.kinds.split(","):
        result["alone"] += alone(kind)
        torch.cuda.empty_cache()
        result["layers"][kind] = layers(kind)
        torch.cuda.empty_cache()
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "l2_prefetch.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
