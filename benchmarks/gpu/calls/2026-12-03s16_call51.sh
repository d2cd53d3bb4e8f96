#!/usr/bin/env bash
# Session s16, ~300 s: gemm-tc's configs at 16-64 rows with five pipelined ones added
# (num_stages 2-3: cp.async prefetch of the next chunk's words and x), against "dot",
# gemv-tc (16 rows) and bf16 -- whether a pipelined gemm-tc beats "dot" at 33-64 rows.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call51; mkdir -p "$work"
pack() { tar czf "$OUT/call51.tgz" -C /tmp call51; }
timeout 330 python3 -m benchmarks.gpu.gemv_tc --kernel gemm-tc --rows 16,32,48,64 --out "$work" > "$work/gemm_tc.log" 2>&1
echo "gemm_tc exit $?"; grep -E "^gemm-tc|WRONG|Error" "$work/gemm_tc.log" | tail -22; pack
