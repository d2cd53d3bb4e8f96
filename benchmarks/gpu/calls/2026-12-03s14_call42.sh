#!/usr/bin/env bash
# Session s14, ~360 s (what was left: a failed start took 121 s): issue 16's comparison with
# the tensor-core GEMV as the default for 2-16 rows (kernels/w4a16_gemv_tc.py) -- the GEMM
# part (dot, gemv, gemv-tc), the bf16 and 4-bit engines (decode at batch 1-256, W,
# memory); the gemv-tc variant's real-shape GPU test; the decode chain at 1-16 rows.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call42; mkdir -p "$work"
pack() { tar czf "$OUT/call42.tgz" -C /tmp call42; }
timeout 265 python3 -m benchmarks.gpu.w4a16 --engines 4bit --variants dot,gemv,gemv-tc \
  --out "$work" > "$work/w4a16.log" 2>&1
echo "w4a16 exit $?"; grep -v "^gemm" "$work/w4a16.log" | tail -32; pack
timeout 40 python3 -m pytest -v -p no:cacheprovider -m gpu \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_every_variant_at_a_real_shape[gemv-tc]" \
  > "$work/gpu_tests.log" 2>&1
echo "GPU test exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$work/gpu_tests.log" | tail -4; pack
timeout 45 python3 -m benchmarks.gpu.decode_chain --out "$work" > "$work/decode_chain.log" 2>&1
echo "decode_chain exit $?"; grep "^decode_chain" "$work/decode_chain.log" | tail -20; pack
