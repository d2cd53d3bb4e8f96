#!/usr/bin/env bash
# Session s23, ~480 s: is paged_decodes_split worth turning on by default on Hopper? Call 92
# measured a long-context mixed step 29.77 -> 19.37 ms with it. Here: s22 call 85's two
# serving-like mixes with and without it; the chat workload (Llama-3-8B shape, seeds 0 and
# 1) and Qwen2.5-0.5B's (seed 0 twice per engine: the first run of a process has been up
# to 16% slower), each the defaults, then an engine with the switch, in one process.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call93; mkdir -p "$work"
pack() { tar czf "$OUT/call93.tgz" -C /tmp call93; }
cp "$0" "$work/command.sh"
for mix in "20 512 1 512" "160 800 2 700"; do
  set -- $mix
  for sw in "" paged_decodes_split; do
    name="d$1_p$3x$4_${sw:-defaults}"
    timeout 75 python3 -m benchmarks.gpu.mixed_step --decodes $1 --context $2 --prompts $3 \
      --prompt $4 --repeats 4 --top 10 --kernel-switches "$sw" --out "$work/$name" \
      > "$work/$name.log" 2>&1
    echo "$name exit $?"; grep -E "^summary" "$work/$name.log" | cut -c1-300; pack
  done
done
summarize() {
  grep -E '^\{"engine"' "$1" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['engine'], r['seed'], r['output_tok_s'], r['fraction_of_limit'], 'mixed', r['mixed_s'],
          r['mixed_steps'], 'few', r['decode_few_s'], 'many', r['decode_many_s'],
          'late compiles', r['late_compiles'])"
}
timeout 120 python3 -m benchmarks.gpu.varlen --shape qwen2.5-0.5b --seeds 0,0 --skip-old-defaults \
  --with-switches paged_decodes_split --out "$work" > "$work/varlen_small.log" 2>&1
echo "small model exit $?"; summarize "$work/varlen_small.log"; pack
timeout 240 python3 -m benchmarks.gpu.varlen --seeds 0,1 --skip-old-defaults \
  --with-switches paged_decodes_split --out "$work" > "$work/varlen.log" 2>&1
echo "8B chat exit $?"; summarize "$work/varlen.log"; pack
