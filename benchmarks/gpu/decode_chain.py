"""A decode step's weight GEMMs as the engine chains them at a few rows (issue 16's batch-1
target, issue 20's batch-1 floor): Llama-3-8B's four projections per layer -- QKV, O,
gate/up, down -- over 32 layers, each GEMM's input the one before's output, captured in
one CUDA graph and replayed, for

- ``bf16``: torch.matmul on bf16 weights (cuBLAS), what the bf16 engine runs;
- ``4bit``: w4a16_gemm's default kernels (default_variant's choice per row count) on
  random codes of the real packing;
- ``+elementwise``: each GEMM followed by an in-place torch op on its output (the
  engine's norms, activations and rotary sit between its GEMMs).

Why: separately timed (call 35), the FFMA GEMV read a layer's 109 MB in 51.6 us at one
row, 0.50 of the copy bandwidth; does a chain of them lose more? Call 40 (s14) also timed
the GEMV launched as a programmatic dependent (Hopper's PDL: its programs read their
weights while the kernel before still ran, and waited for it only before reading x):
57.85 against 59.16 us per layer at one row, 162.1 against 161.0 at four -- no gain, so
it was not kept. Prints us per layer, the read rate against copy bandwidth measured in
the same run, and bf16's time over 4-bit's.

    python -m benchmarks.gpu.decode_chain --out DIR     # DIR/decode_chain.json
    python -m benchmarks.gpu.decode_chain --smoke       # tiny shapes, CPU interpreter
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

from benchmarks.gpu.w4a16 import significant

LAYER = ((4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096))   # K x N, in order
SMOKE_LAYER = ((64, 96), (64, 64), (64, 256), (128, 64))
GROUP, SMOKE_GROUP = 128, 64
VARIANTS = ("bf16", "4bit", "bf16+elementwise", "4bit+elementwise")
# s20: the 16-bit GEMV (kernels/dense_gemv.py) in place of cuBLAS, chosen with --variants.
# (Call 70 also timed GEMVs launched as programmatic dependents, PDL: 1.13-1.43x slower,
# reverted; commit acc59f9 has them.)
GEMV_VARIANTS = ("bf16-gemv",)
# dense_gemv's config per projection (K, N): the best at one row in s20 call 69
GEMV_CONFIGS = {(4096, 6144): (16, 512, 8, 1), (4096, 4096): (4, 512, 4, 3),
                (4096, 28672): (4, 512, 4, 3), (14336, 4096): (4, 512, 4, 3)}


def layer_weights(layer, layers: int, group: int, device: str, dtype, seed: int = 0):
    """Per layer, per projection: (bf16 [K, N], (codes, scales, biases)); weights of mean
    zero and scales that make each GEMM's output about as large as its input, so 128 GEMMs
    in a row stay finite (a mean of -s/2, codes less 8, grows them ~7x a GEMM)."""
    import torch
    gen = torch.Generator(device).manual_seed(seed)
    every = []
    for _ in range(layers):
        per = []
        for k, n in layer:
            dense = torch.randn(k, n, device=device, generator=gen, dtype=torch.float32)
            dense = (dense / math.sqrt(k)).to(dtype)
            codes = torch.randint(-2**31, 2**31 - 1, (k // 8, n), dtype=torch.int32,
                                  device=device, generator=gen)
            scale = 1 / (4.6 * math.sqrt(k))   # codes 0..15 less 7.5: mean 0, std ~4.6
            scales = torch.full((k // group, n), scale, device=device).to(dtype)
            per.append((dense, (codes, scales, (-7.5 * scales).to(dtype))))
        every.append(per)
    return every


def chain(weights, x, variant: str, group: int):
    """One decode step's GEMMs: each one's input the first K columns of the previous
    output (the engine's attention and activation would make them)."""
    from kubellm.kernels.dense_gemv import dense_gemv
    from kubellm.kernels.w4a16_gemm import w4a16_gemm
    gemv = variant in GEMV_VARIANTS   # weights as nn.Linear's [N, K] (run())
    h = x
    for per in weights:
        for dense, quant in per:
            h = h[:, :dense.shape[1 if gemv else 0]]
            if gemv:
                n, k = dense.shape
                h = dense_gemv(h, dense, GEMV_CONFIGS.get((k, n), (4, 32, 4, 1)))
            elif variant.startswith("bf16"):
                h = h @ dense
            else:
                h = w4a16_gemm(h, *quant, group)
            if variant.endswith("+elementwise"):
                h.mul_(1.0)
    return h


def check_one_layer(chosen, weights, x, variant: str, group: int) -> None:
    """A GEMV variant's first layer against the cuBLAS chain's, eager and replayed in a
    CUDA graph. Raises AssertionError naming the variant."""
    import torch
    want = chain(weights[:1], x, "bf16", group).float()
    got = [chain(chosen[:1], x, variant, group).float()]
    if x.is_cuda:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = chain(chosen[:1], x, variant, group)
        graph.replay()
        torch.cuda.synchronize()
        got.append(out.float())
    for g in got:
        diff = ((g - want).abs().max() / (want.abs().max() + 1e-6)).item()
        if not diff < 2e-2:
            raise AssertionError(f"{variant}: one layer differs from bf16 by {diff:.3g}")


def step_us(weights, x, variant: str, group: int, device: str, replays: int = 10) -> float:
    import torch
    chain(weights, x, variant, group)          # compile, autotune, allocate workspaces
    if device != "cuda":
        t0 = time.perf_counter()
        chain(weights, x, variant, group)
        return (time.perf_counter() - t0) * 1e6
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain(weights, x, variant, group)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / replays


def run(smoke: bool, layers: int, rows: list[int], variants=VARIANTS) -> dict:
    import torch

    from benchmarks.gpu import workload_w as W
    device = "cpu" if smoke else "cuda"
    dtype = torch.float32 if smoke else torch.bfloat16
    layer, group = (SMOKE_LAYER, SMOKE_GROUP) if smoke else (LAYER, GROUP)
    if smoke:
        W.DEVICE, W.DTYPE = "cpu", torch.float32
    copy_tb_s = W.measure_ceilings()["copy_tb_s"]
    weights = layer_weights(layer, layers, group, device, dtype)
    weights_nk = None
    elem = torch.tensor([], dtype=dtype).element_size()
    bytes_per_layer = {
        "bf16": sum(k * n * elem for k, n in layer),
        "4bit": sum(k * n // 2 + 2 * (k // group) * n * elem for k, n in layer)}
    result = {"copy_tb_s": copy_tb_s, "layers": layers, "group_size": group,
              "layer_shapes_k_n": [list(s) for s in layer],
              "bytes_per_layer": bytes_per_layer, "rows": []}
    for m in rows:
        x = torch.randn(m, layer[0][0], generator=torch.Generator().manual_seed(m)
                        ).to(device, dtype)
        out = chain(weights, x, "4bit", group).float()
        if not out.isfinite().all():
            raise AssertionError(f"the 4-bit chain overflowed at {m} rows")
        per = {}
        for variant in variants:
            chosen = weights
            if variant in GEMV_VARIANTS:   # nn.Linear's [N, K]; checked against cuBLAS
                if weights_nk is None:
                    weights_nk = [[(d.t().contiguous(), q) for d, q in p] for p in weights]
                chosen = weights_nk
                check_one_layer(chosen, weights, x, variant, group)
            us = step_us(chosen, x, variant, group, device) / layers
            kind = "bf16" if variant.startswith("bf16") else "4bit"
            per[variant] = {"us_per_layer": significant(us),
                            "of_copy_bandwidth": significant(
                                bytes_per_layer[kind] / (us * 1e-6) / 1e12 / copy_tb_s)}
            print("decode_chain", json.dumps({"m": m, "variant": variant, **per[variant]}),
                  flush=True)
        # each 4-bit variant against its bf16 twin, where both ran
        speedup = {v: significant(per["bf16" + v.removeprefix("4bit")]["us_per_layer"]
                                  / per[v]["us_per_layer"], 3)
                   for v in per if v.startswith("4bit") and "bf16" + v.removeprefix("4bit") in per}
        gains = {f"{v} over bf16": significant(per["bf16"]["us_per_layer"]
                                               / per[v]["us_per_layer"], 3)
                 for v in GEMV_VARIANTS if v in per}
        result["rows"].append({"m": m, "variants": per, "bf16_over_4bit": speedup,
                               "speedups": gains})
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--rows", help="row counts (default 1,2,4,8,16; --smoke: 1,2)")
    ap.add_argument("--variants", help="comma-separated, out of "
                    + ",".join(VARIANTS + GEMV_VARIANTS) + f" (default {','.join(VARIANTS)})")
    args = ap.parse_args(argv)
    if args.smoke:   # CPU tensors run the Triton kernel in its interpreter
        os.environ.setdefault("TRITON_INTERPRET", "1")
    rows = args.rows or ("1,2" if args.smoke else "1,2,4,8,16")
    variants = tuple(args.variants.split(",")) if args.variants else VARIANTS
    unknown = set(variants) - set(VARIANTS + GEMV_VARIANTS)
    if unknown or "bf16" not in variants:
        ap.error(f"--variants: unknown {sorted(unknown)}" if unknown else
                 "--variants must hold bf16 (the others are compared with it)")
    result = run(args.smoke, 2 if args.smoke else args.layers,
                 [int(r) for r in rows.split(",")], variants)
    print(json.dumps([{"m": r["m"], "bf16_over_4bit": r["bf16_over_4bit"],
                       "speedups": r["speedups"],
                       **{v: s["us_per_layer"] for v, s in r["variants"].items()}}
                      for r in result["rows"]], indent=1))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "decode_chain.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
