#!/usr/bin/env bash
# Session s22, ~400 s: the paged kernel's decode rows of a mixed step in decode tiles
# (kernel switch paged_decodes_apart). Kernel GPU tests, then the step where prompts join
# running decodes (a mixed-graph step), defaults against the switch, two mixes: one
# 512-token prompt beside 20 decodes of 512 keys (serving), two 700-token prompts beside
# 160 decodes of 800 keys.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call85; mkdir -p "$work"
pack() { tar czf "$OUT/call85.tgz" -C /tmp call85; }
cp "$0" "$work/command.sh"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_paged_attention.py \
  > "$work/kernel_tests.log" 2>&1
echo "kernel tests exit $?"; tail -2 "$work/kernel_tests.log"; pack
for mix in "20 512 1 512" "160 800 2 700"; do
  set -- $mix
  for sw in "" paged_decodes_apart; do
    name="d$1_p$3x$4_${sw:-defaults}"
    timeout 110 python3 -m benchmarks.gpu.mixed_step --decodes $1 --context $2 --prompts $3 \
      --prompt $4 --repeats 4 --top 14 --kernel-switches "$sw" --out "$work/$name" \
      > "$work/$name.log" 2>&1
    echo "$name exit $?"; grep -E "^summary" "$work/$name.log"; pack
  done
done
