#!/usr/bin/env bash
# Not run in s11 (the device budget was spent): for the next session, ~550 s.
# What call 31 could not finish, each part with room: (1) the GPU tests of the 4-bit path
# with the gemv default (call 31's 200 s for them and the engine tests together printed
# nothing), (2) the engine's and async scheduling's CUDA tests (s10's sampler change;
# call 28's plan), (3) the 4-bit engine against bf16 (decode at batch 1-256, W) with the
# default gemv for calls of <= 4 rows. Results packed after each part.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call32; mkdir -p "$work"
pack() { tar czf "$OUT/call32.tgz" -C /tmp call32; }
timeout 240 python3 -m pytest -v -p no:cacheprovider -m gpu tests/gpu/test_quantized_cuda.py \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_every_variant_at_a_real_shape" \
  > "$work/gpu_tests_quantized.log" 2>&1
echo "quantized GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" \
  "$work/gpu_tests_quantized.log" | tail -12; pack
timeout 210 python3 -m pytest -v -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  tests/gpu/test_async_scheduling_cuda.py > "$work/gpu_tests_engine.log" 2>&1
echo "engine GPU tests exit $?"; grep -E "FAILED|ERROR|passed|failed" \
  "$work/gpu_tests_engine.log" | tail -8; pack
timeout 240 python3 -m benchmarks.gpu.w4a16 --engines 4bit --variants dot,gemv \
  --out "$work" > "$work/w4a16.log" 2>&1
echo "w4a16 exit $?"; grep -v "^gemm" "$work/w4a16.log" | tail -30; pack
