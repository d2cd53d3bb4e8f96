#!/usr/bin/env bash
# Session s15, ~150 s (what is left: ~480 s): gemm-tc at 48 and 64 rows with five
# eight-warp configs beside call 45's nine, each alone against "dot" and bf16 -- whether
# one of them takes 48-64 rows from "dot" on every shape.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call47; mkdir -p "$work"
pack() { tar czf "$OUT/call47.tgz" -C /tmp call47; }
timeout 200 python3 -m benchmarks.gpu.gemv_tc --kernel gemm-tc --rows 48,64 --out "$work" > "$work/gemm_tc.log" 2>&1
echo "gemm_tc exit $?"; grep -E "^gemm-tc|WRONG|Error" "$work/gemm_tc.log" | tail -12; pack
