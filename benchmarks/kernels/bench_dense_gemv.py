"""The decode projections of a Llama-3-8B layer (and its LM head) at 1, 2 and 4 rows
(issue 20: batch-1 decode within 10% of the weight-read floor): torch's linear (cuBLAS,
as the engine runs them) against every config of kernels/dense_gemv.py, each as a
fraction of the copy bandwidth (the weights' bytes over the time) measured in the same
run.

At one row cuBLAS read QKV at 0.58 and the output projection at 0.51 of the copy
bandwidth (s10 call 27). This says per projection and row count which is faster and
which config the engine should take.

Timed and checked as benchmarks/kernels/bench_dense_gemm.py does (CUDA-graph replays over
weight copies past the L2; F.linear's output first).

    python -m benchmarks.kernels.bench_dense_gemv --out DIR      # DIR/dense_gemv.json
    python -m benchmarks.kernels.bench_dense_gemv --smoke --out DIR   # tiny, CPU (CI)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common.ceilings import measure_ceilings
from benchmarks.gpu.w4a16 import COLD_BYTES, call_us, significant

# (name, N, K) of a Llama-3-8B layer's projections and its head
SHAPES = (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096),
          ("down", 4096, 14336), ("lm_head", 128256, 4096))
ROWS = (1, 2, 4)
SMOKE_SHAPES = (("qkv", 48, 64), ("down", 32, 128))
SMOKE_ROWS = (1, 3)
SMOKE_CONFIGS = ((8, 32, 4, 1), (4, 64, 4, 1))


def candidates(smoke: bool) -> dict:
    """name -> call(x, w)."""
    from kubellm.kernels.dense_gemv import CONFIGS, dense_gemv
    calls = {"cublas": F.linear}
    for config in SMOKE_CONFIGS if smoke else CONFIGS:
        calls["triton_" + "_".join(map(str, config))] = \
            lambda x, w, c=config: dense_gemv(x, w, c)
    return calls


def run(smoke: bool, shapes: tuple) -> dict:
    device = "cpu" if smoke else "cuda"
    dtype = torch.float32 if smoke else torch.bfloat16
    ceilings = measure_ceilings(device, dtype)
    calls = candidates(smoke)
    rows = []
    for name, n, k in shapes:
        gen = torch.Generator(device=device).manual_seed(n + k)
        copies = 1 if smoke else max(2, -(-COLD_BYTES // (2 * n * k)))
        weights = [(torch.randn(n, k, device=device, generator=gen) * 0.02).to(dtype)
                   for _ in range(copies)]
        for m in SMOKE_ROWS if smoke else ROWS:
            x = torch.randn(m, k, device=device, generator=gen).to(dtype)
            ref = F.linear(x, weights[0]).float()
            row = {"gemm": name, "m": m, "n": n, "k": k, "us": {}, "max_abs_diff": {},
                   "of_copy_bandwidth": {}}
            for kernel, call in calls.items():
                diff = (call(x, weights[0]).float() - ref).abs().max().item()
                row["max_abs_diff"][kernel] = significant(diff)
                if not diff < 0.05 * (ref.abs().max().item() + 1e-6):
                    print(f"WRONG {kernel} {name} m={m}: max abs diff {diff}", flush=True)
                    continue
                us = call_us([lambda w=w: call(x, w) for w in weights], device)
                row["us"][kernel] = significant(us)
                row["of_copy_bandwidth"][kernel] = significant(
                    dtype.itemsize * n * k / (us * 1e-6) / 1e12 / ceilings["copy_tb_s"], 3)
            triton_us = {c: us for c, us in row["us"].items() if c.startswith("triton_")}
            best = min(triton_us, key=triton_us.get)
            row["best_triton"] = best
            row["best_triton_over_cublas"] = significant(row["us"]["cublas"] / triton_us[best], 3)
            rows.append(row)
            print(json.dumps({"gemm": name, "m": m, "best": best,
                              "cublas": row["of_copy_bandwidth"]["cublas"],
                              "triton": row["of_copy_bandwidth"][best],
                              "speedup": row["best_triton_over_cublas"]}), flush=True)
        del weights
        if device == "cuda":
            torch.cuda.empty_cache()
    # one config for every call: the one whose worst time against each row's best is least
    configs = sorted({c for r in rows for c in r["us"] if c.startswith("triton_")})
    worst = {c: max(r["us"][c] / min(r["us"][t] for t in configs if t in r["us"])
                    if c in r["us"] else float("inf") for r in rows) for c in configs}
    one = min(worst, key=worst.get)
    return {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__, "ceilings": ceilings,
            "timing": "cuda-graph replays over weight copies" if device == "cuda"
            else "wall clock", "rows": rows, "one_config": one,
            "one_config_worst_over_best": significant(worst[one], 3)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter")
    ap.add_argument("--shapes", help="comma-separated names out of "
                    + ",".join(s[0] for s in SHAPES))
    args = ap.parse_args()
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    if args.shapes:
        shapes = tuple(s for s in shapes if s[0] in args.shapes.split(","))
    result = run(args.smoke, shapes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dense_gemv.json").write_text(json.dumps(result, indent=1))
    for row in result["rows"]:
        print(f"{row['gemm']:8s} M={row['m']}: of the copy bandwidth cuBLAS "
              f"{row['of_copy_bandwidth']['cublas']}, best Triton "
              f"{row['of_copy_bandwidth'][row['best_triton']]} ({row['best_triton']}, "
              f"{row['best_triton_over_cublas']}x cuBLAS)")
    print("one config for all:", result["one_config"], "worst",
          result["one_config_worst_over_best"], "x its row's best")
    return 0


if __name__ == "__main__":
    sys.exit(main())
