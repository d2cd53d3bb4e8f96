#!/usr/bin/env bash
# 2026-12-02 call 1: the reworked W4A16 GEMV kernel (GPU tests + the GEMM part of the
# w4a16 benchmark) and the prefill attention kernel against SDPA (never run on the H200).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
timeout 200 python3 -m pytest -m gpu tests/kernels/test_w4a16_gemm.py tests/gpu/test_quantized_cuda.py \
  -k "variant or act_order or gemv or (real_shapes and (1-4096 or 1-14336 or 64-4096 or 64-14336))" -q -p no:cacheprovider \
  > "$OUT/w4a16_tests.log" 2>&1; tail -4 "$OUT/w4a16_tests.log"
timeout 200 python3 -m benchmarks.gpu.w4a16 --part kernel --out "$OUT" > "$OUT/w4a16_kernel.log" 2>&1
python3 - "$OUT/w4a16_kernel.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["gemm"]:
    v = {k: (x["us"], x["of_copy_bandwidth"]) for k, x in r["variants"].items()}
    print(r["k"], r["n"], r["m"], "bf16", r["bf16_linear_us"], v, "tg", r.get("tinygemm", {}).get("us"))
PY
timeout 170 python3 -m benchmarks.kernels.bench_prefill_attention --out "$OUT" > "$OUT/prefill_attention.log" 2>&1
tail -15 "$OUT/prefill_attention.log"
