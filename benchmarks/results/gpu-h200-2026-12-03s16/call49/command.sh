#!/usr/bin/env bash
# Session s16, ~560 s: issue 16's comparison with "dequant" (W written out in bf16, then cuBLAS)
# as the default from 65 rows (gemv at 1 row, gemv-tc at 2-8, gemm-tc at 9-32, dot at 33-64):
# the GEMM part, the bf16 and 4-bit engines (decode at batch 1-256, W, memory) -- then the
# 4-bit engine GPU tests with them in their decode graphs.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call49; mkdir -p "$work"
pack() { tar czf "$OUT/call49.tgz" -C /tmp call49; }
timeout 400 python3 -m benchmarks.gpu.w4a16 --engines 4bit --variants dot,gemv,gemv-tc,gemm-tc \
  --out "$work" > "$work/w4a16.log" 2>&1
echo "w4a16 exit $?"; grep -v "^gemm" "$work/w4a16.log" | tail -32; pack
timeout 150 python3 -m pytest -v -s -p no:cacheprovider -m gpu --durations=5 \
  tests/gpu/test_quantized_cuda.py -k "4bit or w4a16" > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$work/gpu_tests.log" | tail -8; pack
