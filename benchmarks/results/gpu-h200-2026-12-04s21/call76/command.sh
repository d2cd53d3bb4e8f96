#!/usr/bin/env bash
# Session s21, ~560 s: (1) the register-operand W4A16 GEMM (kernels/w4a16_gemm_rs.py) on
# the GPU: its test at a real shape, then every W4A16 variant against bf16 at 16-256 rows
# (Llama-3-8B projections); (2) the chat workload, seeds 0 and 1, each queued longest
# max_tokens first (LLM.generate's order now) and in the prompts' order, on one engine.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call76; mkdir -p "$work"
pack() { tar czf "$OUT/call76.tgz" -C /tmp call76; }
cp "$0" "$work/command.sh"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_w4a16_gemm.py \
  -k "every_variant and gemm-rs" > "$work/gpu_tests.log" 2>&1
echo "gemm-rs GPU test exit $?"; tail -3 "$work/gpu_tests.log"; pack
timeout 240 python3 -m benchmarks.gpu.w4a16_rows --rows 16,64,256 --out "$work" \
  > "$work/w4a16_rows.log" 2>&1
echo "w4a16_rows exit $?"; grep -E "^rows|WRONG|^dequantize" "$work/w4a16_rows.log" | cut -c1-300; pack
timeout 200 python3 -m benchmarks.gpu.varlen --seeds 0,1 --skip-old-defaults \
  --with-caller-order --out "$work" > "$work/varlen.log" 2>&1
echo "varlen exit $?"
grep -E '^\{"engine"' "$work/varlen.log" | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['seed'], r['queue_order'], r['steps'], r['output_tok_s'], r['fraction_of_limit'],
          r['fraction_of_strict_limit'], 'mixed', r['mixed_s'], 'few', r['decode_few_s'],
          'many', r['decode_many_s'])"
pack
