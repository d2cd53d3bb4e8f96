#!/usr/bin/env bash
# Session s18, ~400 s: the paged decode kernel's tile config. Call 58's decode_ablation
# found the long split 11% slower at batch 256 / context 513 with different hidden
# states: the autotuner keys on the partial buffers' dtype, so every split call reused
# a config tuned on the first split call (there: one sequence, 32 splits; in the engine:
# a graph warm-up whose sequences hold one key). Decode calls now launch with a fixed
# DECODE_CONFIG; this sweeps every tile config on the chat, W-like, uniform and
# few-sequence batches (unsplit, long split 4x1024 and 8x1024), then runs the ablation
# again with the fixed config, then the paged-attention GPU tests.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call59; mkdir -p "$work"
pack() { tar czf "$OUT/call59.tgz" -C /tmp call59; }
cp "$0" "$work/command.sh"
timeout 240 python3 -m benchmarks.kernels.bench_decode_long_tail --tiles --out "$work" \
  > "$work/tiles.log" 2>&1
echo "tiles exit $?"; grep -E "^geometric|^few" "$work/tiles.log"; pack
timeout 200 python3 -m benchmarks.gpu.decode_ablation --batches 1,256 --out "$work" \
  > "$work/decode_ablation.log" 2>&1; echo "ablation exit $?"
grep -E '^\{"variant"' "$work/decode_ablation.log" | python3 -c "
import json, sys
for line in sys.stdin:
    v = json.loads(line)
    print(v['variant'], v.get('batch1_ms'), v.get('batch256_ms'), v.get('batch256_max_rel_diff'))"
pack
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_paged_attention.py \
  > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; tail -2 "$work/gpu_tests.log"; pack
