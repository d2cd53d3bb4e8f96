#!/usr/bin/env bash
# For the next session (s13's device budget went to calls 33-36 and two failed machine
# starts), ~450 s: issue 16's comparison in one run, now that the gemv kernel compiles
# two configs instead of 17 -- the GEMM part (dot and gemv only), the bf16 engine, the
# 4-bit engine (decode at batch 1-256, context 512, W, weight GiB, KV blocks). Call 31
# and 32 ran out of time in the 4-bit engine's autotuning.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call37; mkdir -p "$work"
pack() { tar czf "$OUT/call37.tgz" -C /tmp call37; }
timeout 520 python3 -m benchmarks.gpu.w4a16 --engines 4bit --variants dot,gemv \
  --out "$work" > "$work/w4a16.log" 2>&1
echo "w4a16 exit $?"; grep -v "^gemm" "$work/w4a16.log" | tail -30; pack
