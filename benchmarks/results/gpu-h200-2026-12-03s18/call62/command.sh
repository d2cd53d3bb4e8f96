#!/usr/bin/env bash
# Session s18, ~250 s: call 61's one failure again -- the long-split engine test, one of
# 40 prompts with a token outside transformers' top-5 at step 14 -- now with the failing
# prompt's teacher-forced gaps (how many stds below transformers' best logit each of our
# tokens sits) in the message: nearly tied logits or a wrong result.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call62; mkdir -p "$work"
cp "$0" "$work/command.sh"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  -k "long_split" > "$work/engine_tests.log" 2>&1
echo "engine GPU test exit $?"; grep -E "^E  .*teacher|passed|failed" "$work/engine_tests.log" | cut -c1-1500
tar czf "$OUT/call62.tgz" -C /tmp call62
