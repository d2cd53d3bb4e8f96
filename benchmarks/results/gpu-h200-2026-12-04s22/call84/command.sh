#!/usr/bin/env bash
# Session s22, ~150 s: does an L2 prefetch (kernels/l2_prefetch.py, Hopper's bulk
# prefetch) issued before a small decode step's attention speed up the next projection?
# One projection alone after a flush and a ~15 us spin, and 32 Llama-3-8B layers at one
# row with the engine's kernels, bf16 and 4-bit (benchmarks/gpu/l2_prefetch.py).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call84; mkdir -p "$work"
pack() { tar czf "$OUT/call84.tgz" -C /tmp call84; }
cp "$0" "$work/command.sh"
timeout 300 python3 -m benchmarks.gpu.l2_prefetch --out "$work" > "$work/l2_prefetch.log" 2>&1
echo "l2_prefetch exit $?"; grep -E "^alone|^layers|Error|error" "$work/l2_prefetch.log" | cut -c1-300
pack
