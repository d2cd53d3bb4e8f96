#!/usr/bin/env bash
# 2026-12-02 s7 call 13 (issue 14): the step a 512-token prompt joins 20 decodes waits on
# the host's ~390 launches (calls 11-12). After: the step's decodes attend without
# split-KV (no merge kernel, no buffers), heap frozen as in the engine core. A/B of the
# fused rotary + KV write (64 launches fewer per step) and of the prefill kernel.
# At most 4 x 75 s.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
i=0
for sw in "" "rope_kv_write=on" "prefill_attention=off" "prefill_attention=off,rope_kv_write=on"; do
  i=$((i+1)); mkdir -p "$OUT/v$i"
  timeout 75 python3 -m benchmarks.gpu.mixed_step --out "$OUT/v$i" --kernel-switches "$sw" \
    --repeats 7 > "$OUT/v$i/log.txt" 2>&1; echo "== v$i ($sw) exit $?"
  grep -E '^summary' "$OUT/v$i/log.txt"
  grep -E '^\{' "$OUT/v$i/log.txt" | cut -c1-200 | tail -3
  grep -iE "error|Traceback" "$OUT/v$i/log.txt" | head -3
  rm -f "$OUT/v$i"/mixed_step_profile_*.txt
done
