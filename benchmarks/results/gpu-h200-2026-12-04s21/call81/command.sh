#!/usr/bin/env bash
# Session s21, ~150 s: the chat workload at Qwen2.5-0.5B's shape, seed 0, queued longest
# max_tokens first and in the prompts' order on one engine (prefix cache reset before each):
# a small model's steps cost the same whatever their batch, so 48 fewer steps weigh more.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call81; mkdir -p "$work"
pack() { tar czf "$OUT/call81.tgz" -C /tmp call81; }
cp "$0" "$work/command.sh"
timeout 200 python3 -m benchmarks.gpu.varlen --shape qwen2.5-0.5b --seeds 0 --skip-old-defaults \
  --with-caller-order --out "$work" > "$work/varlen_small.log" 2>&1
echo "varlen exit $?"
grep -E '^\{"engine"' "$work/varlen_small.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['seed'], r['queue_order'], r['steps'], r['output_tok_s'], r['fraction_of_limit'],
          r['fraction_of_strict_limit'], 'mixed', r['mixed_s'], 'few', r['decode_few_s'],
          'many', r['decode_many_s'])"
pack
