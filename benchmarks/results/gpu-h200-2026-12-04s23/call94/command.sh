#!/usr/bin/env bash
# Session s23, ~480 s: with paged_decodes_split now on by default on Hopper, (1) the
# engine's GPU tests (tests/gpu/test_engine_cuda.py, every default switch on) and the
# paged kernel's; (2) one more long-context mix: 32 decodes of 8,000 keys beside a
# 512-token prompt, the defaults against paged_decodes_split=off.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call94; mkdir -p "$work"
pack() { tar czf "$OUT/call94.tgz" -C /tmp call94; }
cp "$0" "$work/command.sh"
for sw in "" paged_decodes_split=off; do
  name="d32x8000_p1x512_${sw:-defaults}"
  timeout 80 python3 -m benchmarks.gpu.mixed_step --decodes 32 --context 8000 --prompts 1 \
    --prompt 512 --max-model-len 10000 --repeats 4 --top 10 --kernel-switches "$sw" \
    --out "$work/$name" > "$work/$name.log" 2>&1
  echo "$name exit $?"; grep -E "^summary" "$work/$name.log" | cut -c1-300; pack
done
timeout 330 python3 -m pytest -v -rfEs -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  tests/kernels/test_paged_attention.py > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; grep -E "FAILED|ERROR|passed|failed" "$work/gpu_tests.log" | tail -8 | cut -c1-300
pack
