#!/usr/bin/env bash
# Session s21, ~420 s: (1) the chat workload, seeds 0 and 1, queued longest max_tokens first
# (LLM.generate's order) and in the prompts' order on one engine, the prefix cache reset
# before each run (call 76's A/B was void); (2) workload W with the streamed-output host
# cuts (host work per decode step, streamed and final outputs).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call77; mkdir -p "$work"
pack() { tar czf "$OUT/call77.tgz" -C /tmp call77; }
cp "$0" "$work/command.sh"
timeout 200 python3 -m benchmarks.gpu.varlen --seeds 0,1 --skip-old-defaults \
  --with-caller-order --out "$work" > "$work/varlen.log" 2>&1
echo "varlen exit $?"
grep -E '^\{"engine"' "$work/varlen.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['seed'], r['queue_order'], r['steps'], r['output_tok_s'], r['fraction_of_limit'],
          r['fraction_of_strict_limit'], 'mixed', r['mixed_s'], 'few', r['decode_few_s'],
          'many', r['decode_many_s'])"
pack
timeout 150 python3 -m benchmarks.gpu.workload_w --skip-sweep --out "$work" \
  > "$work/workload_w.log" 2>&1
echo "W exit $?"; grep -E "^kubellm W|^ceilings|host" "$work/workload_w.log" | cut -c1-600; pack
