#!/usr/bin/env bash
# 2026-12-02 s11 call 31 (issue 16, and issue 20's "every GPU test green"): w4a16_gemm
# sends calls of <= 4 rows to the gemv kernel by default (call 30: 1.6-2.5x "dot" at one
# row), and its programs may now take several chunks of rows (fewer split-K sums).
# (1) the GPU tests of the 4-bit path, the engine and async scheduling (the latter two also
# cover s10's sampler change, which call 28 was to test); (2) the 4-bit benchmark, bf16
# against the default 4-bit engine: decode at batch 1-256, workload W, the GEMM at 1-64
# rows (dot and gemv). Results are packed after each part (the device budget is short:
# a part cut off by the run's limit still leaves the earlier ones).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call31; mkdir -p "$work"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_quantized_cuda.py \
  tests/gpu/test_engine_cuda.py tests/gpu/test_async_scheduling_cuda.py \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_every_variant_at_a_real_shape" \
  > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; grep -E "^FAILED|^ERROR|passed|failed" "$work/gpu_tests.log" | tail -8
tar czf "$OUT/call31.tgz" -C /tmp call31
timeout 200 python3 -m benchmarks.gpu.w4a16 --engines 4bit --variants dot,gemv \
  --out "$work" > "$work/w4a16.log" 2>&1
echo "w4a16 exit $?"; tail -40 "$work/w4a16.log" | grep -v "^gemm"
tar czf "$OUT/call31.tgz" -C /tmp call31
