#!/usr/bin/env bash
# Session s16, ~450 s: the "dequant" W4A16 variant (kernels/w4a16_dequant.py: W written out
# in bf16, then cuBLAS) -- its GPU tests, where it overtakes "dot" and "gemm-tc" as the rows
# grow (benchmarks/gpu/w4a16_rows.py, with bf16's linear beside), and the decode chain at
# 64-256 rows with it as the default from 128 rows.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call48; mkdir -p "$work"
pack() { tar czf "$OUT/call48.tgz" -C /tmp call48; }
timeout 100 python3 -m pytest -v -p no:cacheprovider -m gpu \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_every_variant_at_a_real_shape[dequant]" \
  tests/kernels/test_w4a16_gemm.py::test_gpu_act_order_and_eight_bit \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_real_shapes" -k "dequant or act_order or 200 or 2048" \
  > "$work/gpu_tests.log" 2>&1
echo "GPU test exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed|Error" "$work/gpu_tests.log" | tail -14; pack
timeout 330 python3 -m benchmarks.gpu.w4a16_rows --out "$work" > "$work/w4a16_rows.log" 2>&1
echo "w4a16_rows exit $?"; grep -E "^rows|^dequant|WRONG|Error" "$work/w4a16_rows.log" | tail -34; pack
timeout 70 python3 -m benchmarks.gpu.decode_chain --rows 64,128,256 --out "$work" > "$work/decode_chain.log" 2>&1
echo "decode_chain exit $?"; grep "^decode_chain" "$work/decode_chain.log" | tail -12; pack
