#!/usr/bin/env bash
# Session s16, ~250 s: every W4A16 kernel GPU test with "dequant" as the default from 65
# rows (all variants at a real shape, the four projections at 1-2048 rows, act order and
# 8-bit), then the tensor-core and dequant kernels' CPU-interpreter tests' GPU twins.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call53; mkdir -p "$work"
pack() { tar czf "$OUT/call53.tgz" -C /tmp call53; }
timeout 280 python3 -m pytest -v -p no:cacheprovider -m gpu --durations=8 \
  tests/kernels/test_w4a16_gemm.py > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed|Error" "$work/gpu_tests.log" | tail -32; pack
