#!/usr/bin/env bash
# Session s19, ~250 s: (1) the GPU tests of the W4A16 kernels and the 4-bit engine, whose
# split-K workspace registry is now keyed by row count too; (2) the chat workload on
# Qwen2.5-0.5B with the s19 rule (steps of 2,049+ tokens take the prefill kernel; its
# steps hold 16,384), against call 64's figure on the rule before.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call68; mkdir -p "$work"
pack() { tar czf "$OUT/call68.tgz" -C /tmp call68; }
cp "$0" "$work/command.sh"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_quantized_cuda.py \
  -k "workspace or 4bit" > "$work/gpu_tests.log" 2>&1
echo "4-bit engine GPU tests exit $?"; tail -2 "$work/gpu_tests.log"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_w4a16_gemm.py \
  > "$work/kernel_tests.log" 2>&1
echo "W4A16 kernel GPU tests exit $?"; tail -2 "$work/kernel_tests.log"; pack
timeout 120 python3 -m benchmarks.gpu.varlen --out "$work" --shape qwen2.5-0.5b --seeds 0 \
  --skip-old-defaults --with-prefill-step-tokens 1000000 > "$work/varlen_small.log" 2>&1
echo "small model exit $?"
grep -E '^\{"engine"' "$work/varlen_small.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['engine'], r['seed'], r['output_tok_s'], r['fraction_of_limit'],
          r['fraction_of_strict_limit'], 'mixed', r['mixed_s'], 'few', r['decode_few_s'],
          'many', r['decode_many_s'])"
pack
