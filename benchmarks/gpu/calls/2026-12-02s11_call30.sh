#!/usr/bin/env bash
# 2026-12-02 s11 call 30 (issue 16): the 4-bit GEMV reworked after call 29 (PTX word dots,
# one row of words at a time, several columns per thread) against w4a16_gemm's dot,
# tinygemm and cuBLAS bf16 at 1, 2, 4 rows; ncu's sections for one call of the new kernel
# and the dot; the W4A16 GEMM's GPU tests.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call30; mkdir -p "$work"
bash benchmarks/gpu/calls/gemv_probe.sh "$work" bf16_cublas,int4_dot,int4_gemv,int4_tinygemm \
  int4_dot,int4_gemv
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_w4a16_gemm.py \
  > "$work/gpu_tests.log" 2>&1; echo "kernel GPU tests exit $?"; tail -3 "$work/gpu_tests.log"
tar czf "$OUT/call30.tgz" -C /tmp call30
