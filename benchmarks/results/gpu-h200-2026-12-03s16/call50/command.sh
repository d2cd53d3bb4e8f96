#!/usr/bin/env bash
# Session s16, ~250 s: call 49's comparison again on the same code (a second sample of the
# 4-bit/bf16 decode rates, whose 16 steps per batch size moved by up to 10% between calls
# 46 and 49 where no kernel they run had changed, and of workload W).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call50; mkdir -p "$work"
pack() { tar czf "$OUT/call50.tgz" -C /tmp call50; }
timeout 400 python3 -m benchmarks.gpu.w4a16 --engines 4bit --variants dot,gemv,gemv-tc,gemm-tc \
  --out "$work" > "$work/w4a16.log" 2>&1
echo "w4a16 exit $?"; grep -v "^gemm" "$work/w4a16.log" | tail -32; pack
