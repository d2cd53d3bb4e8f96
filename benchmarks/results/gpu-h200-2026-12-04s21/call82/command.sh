#!/usr/bin/env bash
# Session s21, ~300 s: Qwen2.5-0.5B's decode attention ran at ~0.57 of the copy bandwidth
# (call 72): ~400 programs of (sequence, KV head) at ~200 rows, each streaming ~800 keys of
# 256 bytes. More programs per sequence (the long split from 256 keys instead of 1,024) on
# its chat workload, seed 0, one process per setting, the default first and last.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call82; mkdir -p "$work"
pack() { tar czf "$OUT/call82.tgz" -C /tmp call82; }
cp "$0" "$work/command.sh"
n=0
for split in default 4,256 8,256 default; do
  n=$((n + 1)); arg=(); [ "$split" != default ] && arg=(--long-split "$split")
  mkdir -p "$work/run$n"
  timeout 100 python3 -m benchmarks.gpu.varlen --shape qwen2.5-0.5b --seeds 0 --skip-old-defaults \
    "${arg[@]}" --out "$work/run$n" > "$work/run$n/varlen_small.log" 2>&1
  echo "run $n long split $split exit $?"
  grep -E '^\{"engine"' "$work/run$n/varlen_small.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print('  ', r['output_tok_s'], r['fraction_of_limit'], 'mixed', r['mixed_s'], 'few',
          r['decode_few_s'], 'many', r['decode_many_s'])"
  pack
done
