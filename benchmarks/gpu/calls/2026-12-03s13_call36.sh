#!/usr/bin/env bash
# Not run in s13: too little device time was left to start a machine after two failed
# starts. For the next session, ~330 s: (1) the 4-bit/FP8 engine GPU tests and the W4A16
# variant test with the gemv kernel tuned over the two configs call 35 chose (calls 32
# and 33 ran out of time autotuning 17); (2) the 4-bit engine alone (decode at batch
# 1-256, W, memory; call 37 compares it with bf16 in one run). Triton's on-disk cache
# carries the compiled kernels from (1) to (2).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call36; mkdir -p "$work"
pack() { tar czf "$OUT/call36.tgz" -C /tmp call36; }
TRITON_PRINT_AUTOTUNING=1 timeout 160 python3 -m pytest -v -s -p no:cacheprovider -m gpu \
  --durations=20 tests/gpu/test_quantized_cuda.py \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_every_variant_at_a_real_shape" \
  > "$work/gpu_tests_quantized.log" 2>&1
echo "quantized GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" \
  "$work/gpu_tests_quantized.log" | tail -20; pack
timeout 140 python3 -m benchmarks.gpu.w4a16 --part engine --engine 4bit --out "$work" \
  > "$work/w4a16_4bit.log" 2>&1
echo "4-bit engine exit $?"; tail -12 "$work/w4a16_4bit.log"; pack
