#!/usr/bin/env bash
# Session s21, ~200 s: host work per decode step on the GPU path, Llama-3-8B shape, batch
# 256, context 512, streamed outputs, before (86e24db's runtime and kernels, unpacked by the
# caller into ab_base/ with `git archive 86e24db runtime kernels`) and after s21's
# streamed-output cuts (this tree), interleaved twice on one machine (hosts differ by up
# to 1.5x between machines: calls 74 and 77).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call78; mkdir -p "$work"
pack() { tar czf "$OUT/call78.tgz" -C /tmp call78; }
cp "$0" "$work/command.sh"
for round in 1 2; do
  for tree in base new; do
    root=$PWD; [ "$tree" = base ] && root=$PWD/ab_base
    PYTHONPATH=$root/runtime:$root/kernels:$PWD timeout 120 python3 -m benchmarks.gpu.host_profile \
      --layers 32 --batch 256 --context 512 --steps 64 --out "$work/${tree}_$round" \
      > "$work/${tree}_$round.log" 2>&1
    echo "$tree round $round exit $?"
    grep -E '^\{' "$work/${tree}_$round.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print('  async', r['async_scheduling'], {k: r.get(k) for k in ('host_ms', 'schedule_ms',
          'prepare_ms', 'postprocess_ms', 'step_ms', 'device_idle_fraction')})"
    pack
  done
done
