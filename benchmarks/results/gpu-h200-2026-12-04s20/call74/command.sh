#!/usr/bin/env bash
# Session s20, ~200 s: issue 20's workloads with all of s20 (host-path cuts, argmax on
# model-dtype logits). (1) the chat workload, Llama-3-8B shape, seeds 0 and 1; (2)
# workload W.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call74; mkdir -p "$work"
pack() { tar czf "$OUT/call74.tgz" -C /tmp call74; }
cp "$0" "$work/command.sh"
timeout 170 python3 -m benchmarks.gpu.varlen --seeds 0,1 --skip-old-defaults --out "$work" \
  > "$work/varlen.log" 2>&1
echo "varlen exit $?"
grep -E '^\{"engine"' "$work/varlen.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['engine'], r['seed'], r['output_tok_s'], r['fraction_of_limit'],
          r['fraction_of_strict_limit'], 'mixed', r['mixed_s'], 'few', r['decode_few_s'],
          'many', r['decode_many_s'])"
pack
timeout 150 python3 -m benchmarks.gpu.workload_w --skip-sweep --out "$work" \
  > "$work/workload_w.log" 2>&1
echo "W exit $?"; grep -E "^kubellm W|^ceilings" "$work/workload_w.log" | cut -c1-600; pack
