#!/usr/bin/env bash
# Session s20, ~240 s: 4-bit weights dequantized into nn.Linear's layout, W^T [N, K], and
# multiplied in cuBLAS's TN form as bf16 weights are (variant "dequant-nk"), against the
# [K, N] layout the engine uses now ("dequant", cuBLAS's NN form). (1) GPU tests of both
# variants at a real shape; (2) every W4A16 variant and bf16 at 128-8192 rows on the four
# Llama-3-8B projections (benchmarks/gpu/w4a16_rows.py).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call71; mkdir -p "$work"
pack() { tar czf "$OUT/call71.tgz" -C /tmp call71; }
cp "$0" "$work/command.sh"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_w4a16_gemm.py \
  -k "every_variant and dequant" > "$work/gpu_tests.log" 2>&1
echo "dequant GPU tests exit $?"; tail -3 "$work/gpu_tests.log"; pack
timeout 330 python3 -m benchmarks.gpu.w4a16_rows --rows 128,256,512,2048,8192 --out "$work" \
  > "$work/w4a16_rows.log" 2>&1
echo "rows bench exit $?"; grep -E "^rows|^dequantize|wins" "$work/w4a16_rows.log"; pack
