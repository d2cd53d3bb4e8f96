"""The decode GEMMs of a Llama-3-8B layer at 128-384 rows (issue 20 item 1): torch's
matmul (cuBLAS, as the engine runs them), the same with cuBLASLt preferred, and every
config of kernels/dense_gemm.py (split-K tiles), each against the GEMM's roofline from
ceilings measured in the same run.

At 256 rows on the H200 cuBLAS ran QKV at 0.69 and the output projection at 0.61 of
their roofline (s18 call 58): too few output tiles for 132 SMs. This says whether a
split-K Triton GEMM or cuBLASLt's choice does better, per projection and row count.

Timing: each call captured once per weight copy (enough copies to pass the L2) in one
CUDA graph, replayed (benchmarks.gpu.w4a16.call_us). Each kernel's output is checked
against F.linear first: a wrong kernel cannot time well.

    python -m benchmarks.kernels.bench_dense_gemm --out DIR      # DIR/dense_gemm.json
    python -m benchmarks.kernels.bench_dense_gemm --smoke --out DIR   # tiny, CPU (CI)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common.ceilings import gemm_floor_ms, measure_ceilings
from benchmarks.gpu.w4a16 import COLD_BYTES, call_us, significant

# (name, N, K) of a Llama-3-8B layer's projections
SHAPES = (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096),
          ("down", 4096, 14336))
ROWS = (128, 192, 256, 384)
SMOKE_SHAPES = (("qkv", 48, 64), ("down", 32, 128))
SMOKE_ROWS = (3, 20)
SMOKE_CONFIGS = ((16, 16, 32, 1, 4, 2), (16, 16, 32, 2, 4, 2))


@contextlib.contextmanager
def blas_library(name: str):
    """torch's preferred BLAS library set to ``name`` inside the block."""
    before = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(name)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(before)


def candidates(smoke: bool) -> dict:
    """name -> (call(x, w), context manager around its capture and replays)."""
    from kubellm.kernels.dense_gemm import CONFIGS, dense_gemm
    calls = {"cublas": (F.linear, contextlib.nullcontext)}
    if not smoke:
        calls["cublaslt"] = (F.linear, lambda: blas_library("cublaslt"))
    for config in SMOKE_CONFIGS if smoke else CONFIGS:
        name = "triton_" + "_".join(map(str, config))
        calls[name] = (lambda x, w, c=config: dense_gemm(x, w, c), contextlib.nullcontext)
    return calls


def run(smoke: bool) -> dict:
    device = "cpu" if smoke else "cuda"
    dtype = torch.float32 if smoke else torch.bfloat16
    ceilings = measure_ceilings(device, dtype)
    calls = candidates(smoke)
    rows = []
    for name, n, k in SMOKE_SHAPES if smoke else SHAPES:
        gen = torch.Generator(device=device).manual_seed(n + k)
        copies = 1 if smoke else max(2, -(-COLD_BYTES // (2 * n * k)))
        weights = [(torch.randn(n, k, device=device, generator=gen) * 0.02).to(dtype)
                   for _ in range(copies)]
        for m in SMOKE_ROWS if smoke else ROWS:
            x = torch.randn(m, k, device=device, generator=gen).to(dtype)
            ref = F.linear(x, weights[0]).float()
            floor_us = gemm_floor_ms(m, n, k, ceilings, dtype.itemsize) * 1e3
            row = {"gemm": name, "m": m, "n": n, "k": k, "floor_us": significant(floor_us),
                   "us": {}, "max_abs_diff": {}}
            for kernel, (call, context) in calls.items():
                with context():
                    diff = (call(x, weights[0]).float() - ref).abs().max().item()
                    us = call_us([lambda w=w: call(x, w) for w in weights], device)
                row["us"][kernel] = significant(us)
                row["max_abs_diff"][kernel] = significant(diff)
            triton_us = {c: us for c, us in row["us"].items() if c.startswith("triton_")}
            best = min(triton_us, key=triton_us.get)
            row["best_triton"] = best
            for kernel in ("cublas", "cublaslt", best):
                if kernel in row["us"]:
                    row.setdefault("fraction_of_floor", {})[kernel] = significant(
                        floor_us / row["us"][kernel], 3)
            row["best_triton_over_cublas"] = significant(row["us"]["cublas"] / triton_us[best], 3)
            rows.append(row)
            print(json.dumps({key: row[key] for key in row if key not in ("us", "max_abs_diff")}),
                  flush=True)
        del weights
        if device == "cuda":
            torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__, "ceilings": ceilings,
            "timing": "cuda-graph replays over weight copies" if device == "cuda"
            else "wall clock", "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter")
    args = ap.parse_args()
    result = run(args.smoke)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dense_gemm.json").write_text(json.dumps(result, indent=1))
    for row in result["rows"]:
        fractions = " ".join(f"{k} {v}" for k, v in row["fraction_of_floor"].items())
        print(f"{row['gemm']:8s} M={row['m']:4d}: of the roofline {fractions}; best Triton "
              f"{row['best_triton_over_cublas']}x cuBLAS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
