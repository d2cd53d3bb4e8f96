#!/usr/bin/env bash
# Session s14, ~400 s: the tensor-core W4A16 GEMV prototype (kernels/w4a16_gemv_tc.py) at
# Llama-3-8B's five shapes and 1-16 rows against the FFMA GEMV and "dot"
# (benchmarks/gpu/gemv_tc.py): is it right on the H200 (bf16 pairs from one LOP3, the
# weights as wgmma's register operand), and how fast.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call41; mkdir -p "$work"
pack() { tar czf "$OUT/call41.tgz" -C /tmp call41; }
timeout 370 python3 -m benchmarks.gpu.gemv_tc --out "$work" > "$work/gemv_tc.log" 2>&1
echo "gemv_tc exit $?"; grep -E "^gemv_tc|WRONG|Error|error" "$work/gemv_tc.log" | cut -c1-330 | tail -30; pack
