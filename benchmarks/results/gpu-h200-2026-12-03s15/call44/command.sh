#!/usr/bin/env bash
# Session s15, ~450 s: the tensor-core W4A16 GEMM for 16-64 rows (kernels/w4a16_gemm_tc.py,
# variant gemm-tc) -- each config alone against "dot" and gemv-tc at Llama-3-8B's shapes,
# the same past 64 rows (tiles of M) against
# "dot" and bf16, its real-shape GPU test, and the decode chain at 1-64 rows with it as the 17-64-row
# default.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call44; mkdir -p "$work"
pack() { tar czf "$OUT/call44.tgz" -C /tmp call44; }
timeout 40 python3 -m pytest -v -p no:cacheprovider -m gpu \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_every_variant_at_a_real_shape[gemm-tc]" \
  > "$work/gpu_tests.log" 2>&1
echo "GPU test exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed|Error" "$work/gpu_tests.log" | tail -6; pack
timeout 170 python3 -m benchmarks.gpu.gemv_tc --kernel gemm-tc --out "$work" > "$work/gemm_tc.log" 2>&1
echo "gemm_tc exit $?"; grep -E "^gemm-tc|WRONG|Error" "$work/gemm_tc.log" | tail -24; pack
timeout 120 python3 -m benchmarks.gpu.gemv_tc --kernel gemm-tc-large --out "$work" > "$work/gemm_tc_large.log" 2>&1
echo "gemm_tc_large exit $?"; grep -E "^gemm-tc|WRONG|Error" "$work/gemm_tc_large.log" | tail -18; pack
timeout 70 python3 -m benchmarks.gpu.decode_chain --rows 1,8,16,32,64 --out "$work" > "$work/decode_chain.log" 2>&1
echo "decode_chain exit $?"; grep "^decode_chain" "$work/decode_chain.log" | tail -24; pack
