#!/usr/bin/env bash
# Session s21, ~200 s: online 4-bit now refits each group's scale and bias by least
# squares at load (layers/quantization/rtn.py), on the GPU when the engine loads there:
# the 4-bit engine's CUDA tests (greedy tokens against transformers on the same
# dequantized weights, graphs and eager, a 4-bit head, tinygemm).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call83; mkdir -p "$work"
pack() { tar czf "$OUT/call83.tgz" -C /tmp call83; }
cp "$0" "$work/command.sh"
timeout 240 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_quantized_cuda.py \
  -k "4bit or w4a16" > "$work/quantized_tests.log" 2>&1
echo "4-bit GPU tests exit $?"; grep -E "passed|failed|Error" "$work/quantized_tests.log" | tail -5; pack
