"""Where each W4A16 GEMM wins as the rows grow (issue 16: batch 64, batch 256, workload
W): "dot", "gemm-tc" (up to GEMM_TC_ROWS rows) and "dequant" (w4a16_dequant.py: W written
out in bf16, then cuBLAS) against torch's bf16 linear on weights of the same shape, at
Llama-3-8B's projections, 32 to 8192 rows: us per call (CUDA-graph replays over weight
copies larger than L2), every output checked against the reference first (a wrong one is
reported and not timed). Also the dequantization alone, its bytes (half a byte read and
two written per weight) against the copy bandwidth measured in the same run. The
smallest row count from which "dequant" beats the others at every shape is the default's
DEQUANT_DEFAULT_MIN_M (kernels/w4a16_gemm.py).

    python -m benchmarks.gpu.w4a16_rows --out DIR [--rows 64,256]   # DIR/w4a16_rows.json
    python -m benchmarks.gpu.w4a16_rows --smoke                      # CPU interpreter
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.gpu.gemv import GROUP, SMOKE_GROUP
from benchmarks.gpu.gemv_configs import int4_copies
from benchmarks.gpu.w4a16 import COLD_BYTES, GEMM_SHAPES, SMOKE_GEMM_SHAPES, call_us, significant

ROWS = (32, 64, 128, 256, 512, 2048, 8192)
SMOKE_ROWS = (3, 40)
GEMM_TC_ROWS = 512   # gemm-tc past this: 0.78-1.37x "dot" at 128-1024 rows (calls 44-45)
VARIANTS = ("dot", "gemm-tc", "dequant")


def run(smoke: bool, row_counts: tuple[int, ...]) -> dict:
    import torch

    from benchmarks.gpu import workload_w as W
    from kubellm.kernels.w4a16_dequant import dequantize_into
    from kubellm.kernels.w4a16_gemm import w4a16_gemm, w4a16_gemm_ref
    device, group = ("cpu", SMOKE_GROUP) if smoke else ("cuda", GROUP)
    dtype = torch.bfloat16
    if smoke:
        W.DEVICE, W.DTYPE = "cpu", torch.float32
    ceilings = W.measure_ceilings()
    copy_tb_s = ceilings["copy_tb_s"]
    copies_of = (lambda b: 1) if smoke else (lambda b: max(2, -(-COLD_BYTES // b)))
    rows_out = []
    for k, n in (SMOKE_GEMM_SHAPES[:1] if smoke else GEMM_SHAPES):
        copies, nbytes = int4_copies(k, n, group, device, dtype, copies_of)
        dense = [torch.randn(k, n, device=device, dtype=dtype) * 0.02
                 for _ in range(copies_of(2 * k * n))]
        scratch = torch.empty((k, n), device=device, dtype=dtype)
        us = call_us([lambda w=w: dequantize_into(scratch, *w, group, 4) for w in copies],
                     device)
        dequant = {"us": significant(us), "of_copy_bandwidth": significant(
            (nbytes + 2 * k * n) / (us * 1e-6) / 1e12 / copy_tb_s)}
        print("dequantize", k, n, json.dumps(dequant), flush=True)
        for m in row_counts:
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(device, dtype)
            ref = w4a16_gemm_ref(x, *copies[0], group).float()
            per, errors = {}, {}
            us = call_us([lambda d=d: torch.mm(x, d) for d in dense], device)
            per["bf16"] = {"us": significant(us), "tflop_s": significant(
                2 * m * k * n / (us * 1e-6) / 1e12)}
            for variant in VARIANTS:
                if variant == "gemm-tc" and m > GEMM_TC_ROWS:
                    continue
                call = lambda w, v=variant: w4a16_gemm(x, *w, group, 4, variant=v)  # noqa: E731
                t0 = time.perf_counter()
                out = call(copies[0]).float()
                err = (out - ref).abs().max().item() / (ref.abs().max().item() + 1e-6)
                errors[variant] = significant(err)
                if not err < 0.02:
                    print(f"WRONG {variant} {k}x{n} m={m}: relative max error {err}", flush=True)
                    continue
                us = call_us([lambda w=w: call(w) for w in copies], device)
                per[variant] = {"us": significant(us), "of_bf16": significant(
                    per["bf16"]["us"] / us, 3), "first_call_s": significant(
                    time.perf_counter() - t0)}
            best = min((v for v in VARIANTS if v in per), key=lambda v: per[v]["us"])
            row = {"k": k, "n": n, "m": m, "best": best, "per": per,
                   "relative_max_error": errors}
            rows_out.append(row)
            print("rows", json.dumps({"k": k, "n": n, "m": m, "best": best} | {
                v: per[v]["us"] for v in per}), flush=True)
        del copies, dense, scratch
    wins = [r["m"] for r in rows_out if r["best"] == "dequant"]
    loses = [r["m"] for r in rows_out if r["best"] != "dequant"]
    # the smallest row count from which dequant wins at every shape and every larger count
    from_rows = min((m for m in sorted(set(wins)) if all(l < m for l in loses)), default=None)
    print("dequant wins at every shape from", from_rows, "rows", flush=True)
    return {"copy_tb_s": copy_tb_s, "matmul_tflops": ceilings.get("matmul_tflops"),
            "group_size": group, "dequantize": dequant, "rows": rows_out,
            "dequant_wins_from_rows": from_rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--rows", help="row counts instead of ROWS, e.g. 64,256")
    args = ap.parse_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    rows = tuple(int(r) for r in args.rows.split(",")) if args.rows else (
        SMOKE_ROWS if args.smoke else ROWS)
    result = run(args.smoke, rows)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "w4a16_rows.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
