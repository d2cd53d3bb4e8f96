#!/usr/bin/env bash
# Session s22, ~150 s: call 89's Qwen2.5-0.5B chat run took 1.19 s in its 27 mixed steps
# against 0.79 in s21 call 81: is it paged_decodes_apart (those steps, 16,384 tokens, go
# through the paged kernel alone at 7 query heads per KV head)? One process, the defaults
# and then an engine with the switch off.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call90; mkdir -p "$work"
pack() { tar czf "$OUT/call90.tgz" -C /tmp call90; }
cp "$0" "$work/command.sh"
timeout 170 python3 -m benchmarks.gpu.varlen --shape qwen2.5-0.5b --seeds 0 --skip-old-defaults \
  --with-switches paged_decodes_apart=off --out "$work" > "$work/varlen_small.log" 2>&1
echo "small model exit $?"
grep -E '^\{"engine"' "$work/varlen_small.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['engine'], r['output_tok_s'], r['fraction_of_limit'], 'mixed', r['mixed_s'],
          r['mixed_steps'], 'few', r['decode_few_s'], 'many', r['decode_many_s'],
          'late compiles', r['late_compiles'])"
pack
