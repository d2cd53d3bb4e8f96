#!/usr/bin/env bash
# 2026-12-02 s8 call 17 (issue 16 item 7; written when this session had no device time
# left, for the next one): FP8 on the H200 - the CUDA tests of FP8 weights (torch._scaled_mm)
# and of the FP8 KV cache (the hardware's float -> E4M3 cast, attention over it), then
# decode tok/s at batch 1-256 and workload W of FP8 weights, an FP8 KV cache and both
# against bf16, in one run (benchmarks/gpu/w4a16.py --engines). About 420 s.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
timeout 150 python3 -m pytest -q -x -p no:cacheprovider -m gpu \
  tests/kernels/test_kv_cache_fp8.py "tests/gpu/test_quantized_cuda.py" -k "fp8" \
  > "$OUT/gpu_tests.log" 2>&1; echo "fp8 GPU tests exit $?"; tail -4 "$OUT/gpu_tests.log"
timeout 270 python3 -m benchmarks.gpu.w4a16 --variants dot --engines fp8,kv-fp8,fp8-kv-fp8 \
  --out "$OUT" > "$OUT/w4a16.log" 2>&1; echo "fp8 engines exit $?"
tail -40 "$OUT/w4a16.log" | cut -c1-300
