#!/usr/bin/env bash
# s13, ~480 s: the GPU tests call 32 left red or unfinished. (1) the engine's and async
# scheduling's CUDA tests (call 32: 3 kernel-switch tests failed at startup, a mixed-step
# graph captured with max_seqlen_q 0 under the tests' prefill-kernel bound of 1 token;
# fixed in model_runner.build_mixed_graphs); (2) the 4-bit/FP8 engine tests and the W4A16
# variant test with a longer limit (call 32's 240 s ran out in the second test), each
# autotuning run printed (TRITON_PRINT_AUTOTUNING) to see where the time goes.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call33; mkdir -p "$work"
pack() { tar czf "$OUT/call33.tgz" -C /tmp call33; }
timeout 140 python3 -m pytest -v -p no:cacheprovider -m gpu --durations=15 \
  tests/gpu/test_engine_cuda.py tests/gpu/test_async_scheduling_cuda.py \
  > "$work/gpu_tests_engine.log" 2>&1
echo "engine GPU tests exit $?"; grep -E "FAILED|ERROR|passed|failed" \
  "$work/gpu_tests_engine.log" | tail -8; pack
TRITON_PRINT_AUTOTUNING=1 timeout 330 python3 -m pytest -v -s -p no:cacheprovider -m gpu \
  --durations=20 tests/gpu/test_quantized_cuda.py \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_every_variant_at_a_real_shape" \
  > "$work/gpu_tests_quantized.log" 2>&1
echo "quantized GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" \
  "$work/gpu_tests_quantized.log" | tail -16
grep -c "autotuning for function" "$work/gpu_tests_quantized.log"; pack
