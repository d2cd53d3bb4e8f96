"""The tensor-core W4A16 GEMV (kernels/w4a16_gemv_tc.py), each of its configs alone, against
the FFMA GEMV (1-4 rows) and the "dot" kernel at Llama-3-8B's shapes and 1-16 rows: us per
call (CUDA-graph replays over weight copies larger than L2), the read rate against the
copy bandwidth measured in the same run, every output checked against the reference
first (a wrong one is reported and not timed). Call 41 (2026-12-03) ran it to choose the
kernel and its configs.

    python -m benchmarks.gpu.gemv_tc --out DIR      # DIR/gemv_tc.json
    python -m benchmarks.gpu.gemv_tc --smoke        # tiny shapes, CPU interpreter
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

ROWS = (1, 2, 4, 8, 16)
# (BLOCK_N, ROWS, CHUNKS, num_warps): SASS on this machine (tests/kernels/sass_for_hopper):
# 2.4-3.5 instructions per weight at any row count up to 16, no spills
CONFIGS = ((512, 16, 2, 4), (256, 16, 2, 4), (1024, 16, 1, 8), (512, 16, 1, 4),
           (256, 16, 1, 4), (128, 16, 4, 4))
SMOKE_CONFIGS = ((32, 1, 4), (32, 2, 4))   # (BLOCK_N, CHUNKS, warps): ROWS from the group


def run(smoke: bool) -> dict:
    import torch

    from benchmarks.gpu import workload_w as W
    from kubellm.kernels import w4a16_gemv_tc
    from kubellm.kernels.w4a16_gemm import w4a16_gemm, w4a16_gemm_ref
    device, group = ("cpu", SMOKE_GROUP) if smoke else ("cuda", GROUP)
    dtype = torch.bfloat16      # (the GEMVs take fp16 / bf16 only; the interpreter too)
    if smoke:
        W.DEVICE, W.DTYPE = "cpu", torch.float32
    copy_tb_s = W.measure_ceilings()["copy_tb_s"]
    copies_of = (lambda b: 1) if smoke else (lambda b: max(2, -(-COLD_BYTES // b)))
    configs = SMOKE_CONFIGS if smoke else [(n, c, w) for n, _, c, w in CONFIGS]
    rows_out = []
    for k, n in (SMOKE_SHAPES[:1] if smoke else SHAPES):   # (smoke: CI time)
        copies, nbytes = int4_copies(k, n, group, device, dtype, copies_of)
        for m in ((2, 9) if smoke else ROWS):
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(device, dtype)
            ref = w4a16_gemm_ref(x, *copies[0], group).float()
            rows = w4a16_gemv_tc.rows_for(group)
            calls = {f"tc_{c[0]}x{rows}x{c[1]}x{c[2]}": (
                lambda w, c=c: w4a16_gemv_tc.launch(x, *w, group, c)) for c in configs}
            calls["dot"] = lambda w: w4a16_gemm(x, *w, group, 4, variant="dot")
            if m <= 4:
                calls["gemv"] = lambda w: w4a16_gemm(x, *w, group, 4, variant="gemv")
            per, errors = {}, {}
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
            base = "gemv" if "gemv" in per else "dot"
            row = {"k": k, "n": n, "m": m, "best_tc": best_tc, "per": per,
                   "relative_max_error": errors,
                   "best_tc_speedup_vs_" + base: significant(
                       per[base]["us"] / per[best_tc]["us"], 3) if best_tc and base in per
                   else None}
            rows_out.append(row)
            print("gemv_tc", json.dumps({key: row[key] for key in row if key not in (
                "per", "relative_max_error")} | {
                "best_tc_us": per[best_tc]["us"] if best_tc else None,
                "best_tc_of_copy": per[best_tc]["of_copy_bandwidth"] if best_tc else None,
                base + "_us": per.get(base, {}).get("us")}), flush=True)
        del copies
    return {"copy_tb_s": copy_tb_s, "group_size": group, "rows": rows_out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    result = run(args.smoke)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gemv_tc.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
