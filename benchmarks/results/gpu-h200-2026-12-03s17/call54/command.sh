#!/usr/bin/env bash
# Session s17, ~420 s: issue 20's long-tailed decode steps. The paged kernel's GPU tests
# (with the long split), then the decode attention alone over the chat workload's decode
# batches (unsplit against the long split, several split counts and chunk sizes), then the
# chat workload (seed 0) with the defaults and with decode_long_split on at the best
# (S, C) of the chat batches.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call54; mkdir -p "$work"
pack() { tar czf "$OUT/call54.tgz" -C /tmp call54; }
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_paged_attention.py \
  > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; tail -3 "$work/gpu_tests.log"; pack
timeout 200 python3 -m benchmarks.kernels.bench_decode_long_tail --out "$work" > "$work/long_tail.log" 2>&1
echo "long tail exit $?"; grep -v "^    " "$work/long_tail.log" | tail -8; pack
best=$(python3 - "$work/bench_decode_long_tail.json" <<'PY'
import json, math, sys
cases = [c for c in json.load(open(sys.argv[1]))["cases"] if c["case"].startswith("chat")]
score = {}
for case in cases:   # geometric mean speedup over the chat batches
    for c in case["configs"][1:]:
        score.setdefault((c["splits"], c["min_chunk"]), []).append(math.log(c["speedup_vs_unsplit"]))
(s, c), logs = max(score.items(), key=lambda kv: sum(kv[1]))
print(f"{s},{c}")
PY
)
echo "best long split: ${best:-none}"
timeout 300 python3 -m benchmarks.gpu.varlen --seeds 0 --skip-old-defaults \
  --with-switches decode_long_split ${best:+--long-split $best} --out "$work" > "$work/varlen.log" 2>&1
echo "varlen exit $?"; grep -E "^\{|fraction" "$work/varlen.log" | cut -c1-600; pack
