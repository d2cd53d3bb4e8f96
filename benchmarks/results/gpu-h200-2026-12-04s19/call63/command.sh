#!/usr/bin/env bash
# Session s19, ~480 s: s18's PREFILL_CONFIG (32/4/2 for paged calls with prefill chunks,
# which in the engine serve every chunk under 2,048 tokens) under the engine's GPU tests,
# then the chat workload with it against the autotuner's choice (tuned at the mixed
# graphs' zero-query warm-ups, as before s18), one engine each in one process.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call63; mkdir -p "$work"
pack() { tar czf "$OUT/call63.tgz" -C /tmp call63; }
cp "$0" "$work/command.sh"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  -k "mixed_step_graphs or long_split or 32k or (transformers and llama3 and graphs)" \
  > "$work/engine_tests.log" 2>&1
echo "engine GPU tests exit $?"; tail -3 "$work/engine_tests.log"; pack
timeout 300 python3 -m benchmarks.gpu.varlen --seeds 0,1 --skip-old-defaults \
  --with-prefill-config autotune --out "$work" > "$work/varlen.log" 2>&1
echo "varlen exit $?"
grep -E '^\{"engine"' "$work/varlen.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['engine'], r['seed'], r['output_tok_s'], r['fraction_of_limit'],
          r['fraction_of_strict_limit'], 'mixed', r['mixed_s'], 'few', r['decode_few_s'],
          'many', r['decode_many_s'])"
pack
