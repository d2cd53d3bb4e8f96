#!/usr/bin/env bash
# Session s19, ~450 s: call 66 again with the prefill kernel's short-prompt bucket tuned
# at startup (memory_profiler.warm_short_prefill; in call 66 the new rule's engine tuned
# it in its first seed's run). (1) the engine's GPU agreement tests that take the prefill
# kernel; (2) the chat workload, seeds 0-2, the new rule against the one before.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call67; mkdir -p "$work"
pack() { tar czf "$OUT/call67.tgz" -C /tmp call67; }
cp "$0" "$work/command.sh"
timeout 170 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  -k "kernel_switches or 32k or mixed_step_graphs" > "$work/engine_tests.log" 2>&1
echo "engine GPU tests exit $?"; grep -E "near ties|passed|failed" "$work/engine_tests.log" | cut -c1-600
pack
timeout 300 python3 -m benchmarks.gpu.varlen --seeds 0,1,2 --skip-old-defaults \
  --with-prefill-step-tokens 1000000 --out "$work" > "$work/varlen.log" 2>&1
echo "varlen exit $?"
grep -E '^\{"engine"' "$work/varlen.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['engine'], r['seed'], r['startup_s'], r['output_tok_s'], r['fraction_of_limit'],
          r['fraction_of_strict_limit'], 'mixed', r['mixed_s'], 'few', r['decode_few_s'],
          'many', r['decode_many_s'])"
pack
