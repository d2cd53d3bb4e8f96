#!/usr/bin/env bash
# Session s15, ~300 s: call 44 again with one dot per chunk (ONE_DOT configs: the weights
# joined into x's K order) beside a dot per code position -- gemm-tc (8-64 rows) and
# gemm-tc-large (128-1024 rows), each config alone against "dot", gemv-tc and bf16; the
# real-shape GPU test; the decode chain at 16-64 rows.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call45; mkdir -p "$work"
pack() { tar czf "$OUT/call45.tgz" -C /tmp call45; }
timeout 40 python3 -m pytest -v -p no:cacheprovider -m gpu \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_every_variant_at_a_real_shape[gemm-tc]" \
  > "$work/gpu_tests.log" 2>&1
echo "GPU test exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed|Error" "$work/gpu_tests.log" | tail -6; pack
timeout 170 python3 -m benchmarks.gpu.gemv_tc --kernel gemm-tc --out "$work" > "$work/gemm_tc.log" 2>&1
echo "gemm_tc exit $?"; grep -E "^gemm-tc|WRONG|Error" "$work/gemm_tc.log" | tail -24; pack
timeout 120 python3 -m benchmarks.gpu.gemv_tc --kernel gemm-tc-large --out "$work" > "$work/gemm_tc_large.log" 2>&1
echo "gemm_tc_large exit $?"; grep -E "^gemm-tc|WRONG|Error" "$work/gemm_tc_large.log" | tail -18; pack
timeout 60 python3 -m benchmarks.gpu.decode_chain --rows 16,32,64 --out "$work" > "$work/decode_chain.log" 2>&1
echo "decode_chain exit $?"; grep "^decode_chain" "$work/decode_chain.log" | tail -24; pack
