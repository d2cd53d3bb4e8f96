#!/usr/bin/env bash
# Session s19, ~430 s: steps of 2,049+ new tokens take the prefill kernel for their
# prompts (and the paged kernel's decode tiles for their decodes) whatever their chunks'
# lengths (triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS), against the rule before (only
# chunks of 2,048+ tokens), one engine each in one process: (1) the chat-like mixed step
# profiled again; (2) the chat workload, seeds 0 and 1; (3) workload W.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call66; mkdir -p "$work"
pack() { tar czf "$OUT/call66.tgz" -C /tmp call66; }
cp "$0" "$work/command.sh"
timeout 100 python3 -m benchmarks.gpu.mixed_step --decodes 160 --context 800 --prompts 12 \
  --prompt 700 --max-model-len 4096 --repeats 3 --top 30 --out "$work/mixed" \
  > "$work/mixed_step.log" 2>&1
echo "mixed step exit $?"; grep -E "^summary" "$work/mixed_step.log" | cut -c1-300
head -12 "$work/mixed/mixed_step_profile_mixed.txt" | cut -c1-200; pack
timeout 200 python3 -m benchmarks.gpu.varlen --seeds 0,1 --skip-old-defaults \
  --with-prefill-step-tokens 1000000 --out "$work" > "$work/varlen.log" 2>&1
echo "varlen exit $?"
grep -E '^\{"engine"' "$work/varlen.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['engine'], r['seed'], r['output_tok_s'], r['fraction_of_limit'],
          r['fraction_of_strict_limit'], 'mixed', r['mixed_s'], 'few', r['decode_few_s'],
          'many', r['decode_many_s'])"
pack
timeout 200 python3 -m benchmarks.gpu.w_switches --with-prefill-step-tokens 1000000 \
  --out "$work" > "$work/w_switches.log" 2>&1
echo "W A/B exit $?"; grep -E "^\{|over the defaults" "$work/w_switches.log" | cut -c1-400; pack
