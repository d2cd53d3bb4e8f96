"""The tensor-core W4A16 kernels, each config alone: the GEMV (kernels/w4a16_gemv_tc.py,
1-16 rows) against the FFMA GEMV (1-4 rows) and "dot", and the GEMM (w4a16_gemm_tc.py;
16-64 rows, "gemm-tc", and 128-1024, "gemm-tc-large") against the GEMV (16 rows), "dot"
and bf16 weights through torch's linear, at Llama-3-8B's shapes: us per call
(CUDA-graph replays over weight copies larger than L2), the read rate against the copy
bandwidth measured in the same run, every output checked against the reference first (a
wrong one is reported and not timed). Call 41 (2026-12-03) ran the GEMV part to choose
that kernel and its configs.

    python -m benchmarks.gpu.gemv_tc --out DIR [--kernel KERNEL]   # DIR/<kernel>.json
    python -m benchmarks.gpu.gemv_tc --smoke [--kernel KERNEL]     # CPU interpreter
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.gpu.gemv import GROUP, SHAPES, SMOKE_GROUP, SMOKE_SHAPES
from benchmarks.gpu.gemv_configs import int4_copies
from benchmarks.gpu.w4a16 import COLD_BYTES, call_us, significant

# per kernel: its module, rows timed (smoke: rows), the configs (smoke: configs) its launch
# takes, the variants it is compared with at rows up to a bound ("bf16": torch's linear
# on bf16 weights of the same shape)
KERNELS = {
    # (BLOCK_N, CHUNKS, num_warps): call 41's six minus those of 512- and 1024-wide tiles,
    # which lost at every shape
    "gemv-tc": ("w4a16_gemv_tc", (1, 2, 4, 8, 16), (2, 9),
                ((256, 2, 4), (256, 1, 4), (128, 4, 4)), ((32, 1, 4), (32, 2, 4)),
                {"dot": 16, "gemv": 4}),
    # (BLOCK_N, CHUNKS, num_warps, num_stages, ONE_DOT): call 44's best four (a dot per
    # code position), and the same tiles with one dot per chunk
    "gemm-tc": ("w4a16_gemm_tc", (8, 16, 32, 48, 64), (17, 40),
                ((128, 4, 4, 1, False), (128, 8, 4, 1, False), (128, 2, 4, 1, False),
                 (64, 4, 4, 1, False), (128, 4, 4, 1, True), (64, 4, 4, 1, True),
                 (128, 2, 4, 1, True), (128, 4, 4, 2, True), (64, 4, 4, 2, True),
                 # eight warps: 3.2-4.2 instructions per weight, but 1.01-1.42x the best
                 # four-warp config's time at 48-64 rows (call 47)
                 (256, 4, 8, 1, False), (128, 4, 8, 1, False), (128, 4, 8, 1, True),
                 (256, 2, 8, 1, False), (256, 4, 8, 1, True),
                 # a dot per code position, pipelined (cp.async prefetch of the next
                 # chunk's words and x; 4.3 instead of 3.6 SASS instructions per weight
                 # at 64 rows, no spills): 1.05-1.3x the best config above at 16-64 rows,
                 # but 0.97-0.98x at 16 rows on 4096x28672 and the head (call 51)
                 (128, 4, 4, 2, False), (128, 4, 4, 3, False), (128, 8, 4, 2, False),
                 (128, 2, 4, 2, False), (64, 4, 4, 2, False)),
                 # (s23 call 92 also timed five configs loading the next chunk's words,
                 # scales and biases into registers before this chunk's MMAs: built for
                 # sm_90 their weights reached wgmma through shared memory, and they took
                 # 1.03-1.78x the best config's time at 32-64 rows; commit d8bf906)
                ((32, 1, 4, 1, False), (32, 2, 4, 1, True)),
                {"dot": 64, "gemv-tc": 16, "bf16": 64}),
    # the same kernel past 64 rows, tiles of M: (BLOCK_N, BLOCK_M, num_warps, num_stages,
    # ONE_DOT)
    "gemm-tc-large": ("w4a16_gemm_tc", (128, 256, 1024), (70,),
                      ((128, 64, 4, 1, False), (256, 128, 8, 1, False), (128, 64, 4, 1, True),
                       (256, 128, 8, 1, True), (128, 128, 8, 2, True), (128, 64, 4, 2, True),
                       (256, 64, 8, 2, True)),
                      ((32, 32, 4, 1, True),), {"dot": 1 << 20, "bf16": 1 << 20}),
}


def run(smoke: bool, kernel: str = "gemv-tc", row_counts: list[int] | None = None) -> dict:
    import importlib

    import torch

    from benchmarks.gpu import workload_w as W
    from kubellm.kernels.w4a16_gemm import w4a16_gemm, w4a16_gemm_ref
    module_name, all_rows, smoke_rows, all_configs, smoke_configs, peers = KERNELS[kernel]
    module = importlib.import_module("kubellm.kernels." + module_name)
    device, group = ("cpu", SMOKE_GROUP) if smoke else ("cuda", GROUP)
    dtype = torch.bfloat16      # (the GEMVs take fp16 / bf16 only; the interpreter too)
    if smoke:
        W.DEVICE, W.DTYPE = "cpu", torch.float32
    copy_tb_s = W.measure_ceilings()["copy_tb_s"]
    copies_of = (lambda b: 1) if smoke else (lambda b: max(2, -(-COLD_BYTES // b)))
    configs = smoke_configs if smoke else all_configs
    rows_out = []
    for k, n in (SMOKE_SHAPES[:1] if smoke else SHAPES):   # (smoke: CI time)
        copies, nbytes = int4_copies(k, n, group, device, dtype, copies_of)
        dense = [torch.randn(n, k, device=device, dtype=dtype) * 0.02 for _ in range(
            copies_of(2 * k * n))] if "bf16" in peers else []
        for m in (row_counts or (smoke_rows if smoke else all_rows)):
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(device, dtype)
            ref = w4a16_gemm_ref(x, *copies[0], group).float()
            rows = module.rows_for(group)
            calls = {"tc_" + "x".join(map(str, (c[0], rows, *c[1:]))).replace(
                "xTrue", "x1dot").replace("xFalse", ""): (
                lambda w, c=c: module.launch(x, *w, group, c)) for c in configs}
            for peer, most in peers.items():
                if m <= most and peer != "bf16":
                    calls[peer] = lambda w, p=peer: w4a16_gemm(x, *w, group, 4, variant=p)
            per, errors = {}, {}
            if dense and m <= peers["bf16"]:   # (other weights: its time, not its product)
                us = call_us([lambda d=d: torch.nn.functional.linear(x, d) for d in dense],
                             device)
                per["bf16"] = {"us": significant(us), "of_copy_bandwidth": significant(
                    2 * k * n / (us * 1e-6) / 1e12 / copy_tb_s)}
            for name, call in calls.items():
                t0 = time.perf_counter()
                out = call(copies[0]).float()
                err = (out - ref).abs().max().item() / (ref.abs().max().item() + 1e-6)
                errors[name] = significant(err)
                if not err < 0.02:
                    print(f"WRONG {name} {k}x{n} m={m}: relative max error {err}", flush=True)
                    continue
                us = call_us([lambda w=w: call(w) for w in copies], device)
                per[name] = {"us": significant(us), "of_copy_bandwidth": significant(
                    nbytes / (us * 1e-6) / 1e12 / copy_tb_s), "first_call_s": significant(
                    time.perf_counter() - t0)}
            best_tc = min((v for v in per if v.startswith("tc_")), key=lambda v: per[v]["us"],
                          default=None)
            base = next((p for p in list(peers)[::-1] if p in per and p != "bf16"), "dot")
            row = {"k": k, "n": n, "m": m, "best_tc": best_tc, "per": per,
                   "relative_max_error": errors,
                   "best_tc_speedup_vs_" + base: significant(
                       per[base]["us"] / per[best_tc]["us"], 3) if best_tc and base in per
                   else None}
            rows_out.append(row)
            print(kernel, json.dumps({key: row[key] for key in row if key not in (
                "per", "relative_max_error")} | {
                "best_tc_us": per[best_tc]["us"] if best_tc else None,
                "best_tc_of_copy": per[best_tc]["of_copy_bandwidth"] if best_tc else None,
                base + "_us": per.get(base, {}).get("us"),
                "bf16_us": per.get("bf16", {}).get("us")}), flush=True)
        del copies, dense
    return {"copy_tb_s": copy_tb_s, "group_size": group, "rows": rows_out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--kernel", choices=sorted(KERNELS), default="gemv-tc")
    ap.add_argument("--rows", help="row counts instead of the kernel's, e.g. 48,64")
    args = ap.parse_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    result = run(args.smoke, args.kernel,
                 [int(r) for r in args.rows.split(",")] if args.rows else None)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.kernel.replace('-', '_')}.json").write_text(
            json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
