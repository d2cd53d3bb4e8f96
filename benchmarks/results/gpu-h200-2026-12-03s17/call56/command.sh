#!/usr/bin/env bash
# Session s17, ~330 s: the long split with its merge done by the last split program of
# each q-block (no merge kernel): the paged kernel's split GPU tests, the decode attention
# over the chat workload's decode batches and a W-like one, then workload W with
# decode_long_split off and on (two engines, two W runs each) at the best (S, C) over all
# the batches.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call56; mkdir -p "$work"
pack() { tar czf "$OUT/call56.tgz" -C /tmp call56; }
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_paged_attention.py \
  -k "split or long" > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; tail -2 "$work/gpu_tests.log"; pack
timeout 150 python3 -m benchmarks.kernels.bench_decode_long_tail --out "$work" > "$work/long_tail.log" 2>&1
echo "long tail exit $?"; grep -v "^    " "$work/long_tail.log" | tail -8; pack
best=$(python3 - "$work/bench_decode_long_tail.json" <<'PY'
import json, math, sys
cases = json.load(open(sys.argv[1]))["cases"]
score = {}
for case in cases:   # geometric mean speedup over every batch, W-like included
    for c in case["configs"][2:]:
        score.setdefault((c["splits"], c["min_chunk"]), []).append(math.log(c["speedup_vs_unsplit"]))
(s, c), logs = max(score.items(), key=lambda kv: sum(kv[1]))
print(f"{s},{c}")
PY
)
echo "best long split: ${best:-none}"
timeout 330 python3 -m benchmarks.gpu.w_switches --with decode_long_split ${best:+--long-split $best} \
  --out "$work" > "$work/w_switches.log" 2>&1
echo "W A/B exit $?"; grep -E "^\{|over the defaults" "$work/w_switches.log"; pack
