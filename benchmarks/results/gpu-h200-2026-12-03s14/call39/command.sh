#!/usr/bin/env bash
# Session s14: call 38's decode chain again (its 4-bit weights had a mean of -s/2,
# so 128 GEMMs in a row overflowed), then the two W4A16 A/B variants' GPU test that call 38
# ran out of time in (dot-rows, dot-zeros: 14 decode tiles autotuned each).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call39; mkdir -p "$work"
pack() { tar czf "$OUT/call39.tgz" -C /tmp call39; }
timeout 200 python3 -m benchmarks.gpu.decode_chain --out "$work" > "$work/decode_chain.log" 2>&1
echo "decode_chain exit $?"; tail -40 "$work/decode_chain.log"; pack
timeout 150 python3 -m pytest -v -s -p no:cacheprovider -m gpu --durations=5 \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_every_variant_at_a_real_shape" \
  -k "dot-rows or dot-zeros" > "$work/gpu_tests_variants.log" 2>&1
echo "variant GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" \
  "$work/gpu_tests_variants.log" | tail -8; pack
