#!/usr/bin/env bash
# Session s18, ~480 s: the engine with the paged decode kernel's fixed tile config
# (DECODE_CONFIG 64/4/2, LONG_SPLITS 4) against the autotuner's choice as before (tuned at
# the graph warm-ups, one key per sequence), one engine each in one process: workload W
# (two runs per engine), then the chat workload (seeds 0 and 1).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call60; mkdir -p "$work"
pack() { tar czf "$OUT/call60.tgz" -C /tmp call60; }
cp "$0" "$work/command.sh"
timeout 230 python3 -m benchmarks.gpu.w_switches --with-decode-config autotune \
  --out "$work" > "$work/w_switches.log" 2>&1
echo "W A/B exit $?"; grep -E "^\{|over the defaults" "$work/w_switches.log" | cut -c1-400; pack
timeout 300 python3 -m benchmarks.gpu.varlen --seeds 0,1 --skip-old-defaults \
  --with-decode-config autotune --out "$work" > "$work/varlen.log" 2>&1
echo "varlen exit $?"
grep -E '^\{"engine"' "$work/varlen.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['engine'], r['seed'], r['output_tok_s'], r['fraction_of_limit'],
          r['fraction_of_strict_limit'], 'mixed', r['mixed_s'], 'few', r['decode_few_s'],
          'many', r['decode_many_s'])"
pack
