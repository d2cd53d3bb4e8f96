#!/usr/bin/env bash
# Session s22, ~330 s: this session's tree (paged_decodes_apart on by default) on the
# headline workloads: (1) the chat workload, seeds 0 and 1, one engine; (2) workload W;
# (3) the chat workload at Qwen2.5-0.5B's shape, seed 0. Each run now records the Triton
# compiles inside it (late_compiles).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call89; mkdir -p "$work"
pack() { tar czf "$OUT/call89.tgz" -C /tmp call89; }
cp "$0" "$work/command.sh"
show() {
  grep -E '^\{"engine"' "$1" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['seed'], r['steps'], r['output_tok_s'], r['fraction_of_limit'],
          r['fraction_of_strict_limit'], 'mixed', r['mixed_s'], 'few', r['decode_few_s'],
          'many', r['decode_many_s'], 'late compiles', r['late_compiles'])"
}
timeout 170 python3 -m benchmarks.gpu.varlen --seeds 0,1 --skip-old-defaults --out "$work" \
  > "$work/varlen.log" 2>&1
echo "varlen exit $?"; show "$work/varlen.log"; pack
timeout 150 python3 -m benchmarks.gpu.workload_w --skip-sweep --out "$work" \
  > "$work/workload_w.log" 2>&1
echo "W exit $?"; grep -E "^kubellm W|^ceilings|host" "$work/workload_w.log" | cut -c1-600; pack
timeout 90 python3 -m benchmarks.gpu.varlen --shape qwen2.5-0.5b --seeds 0 --skip-old-defaults \
  --out "$work" > "$work/varlen_small.log" 2>&1
echo "small model exit $?"; show "$work/varlen_small.log"; pack
