#!/usr/bin/env bash
# Session s20, ~250 s: the paged kernel's decode tile configs at Qwen2.5-0.5B's heads (14
# query, 2 KV, dim 64), where a decode step's attention read its KV at ~0.57 of the copy
# bandwidth (call 72): every config of TILE_CONFIGS on the chat workload's decode batches
# (benchmarks/kernels/bench_decode_long_tail.py --tiles).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call75; mkdir -p "$work"
pack() { tar czf "$OUT/call75.tgz" -C /tmp call75; }
cp "$0" "$work/command.sh"
timeout 280 python3 -m benchmarks.kernels.bench_decode_long_tail --tiles --heads 14 \
  --kv-heads 2 --head-dim 64 --out "$work" > "$work/tiles_qwen.log" 2>&1
echo "tiles exit $?"; grep -v "^    " "$work/tiles_qwen.log" | tail -30 | cut -c1-300; pack
