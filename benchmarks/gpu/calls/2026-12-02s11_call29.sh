#!/usr/bin/env bash
# 2026-12-02 s11 call 29 (issues 16 and 20): one to four rows through each weight-read
# bound product (benchmarks/gpu/gemv.py), every kernel, then ncu's sections for one call
# of each at 4096x28672, one row. As run (tree 3f0911a) it also timed a bf16 row-dot
# kernel (kernels/dense_gemv.py) and w4a16_gemm's first gemv kernel, both since removed.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call29; mkdir -p "$work"
bash benchmarks/gpu/calls/gemv_probe.sh "$work"
tar czf "$OUT/call29.tgz" -C /tmp call29
