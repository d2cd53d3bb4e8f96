#!/usr/bin/env bash
# Session s20, ~420 s: the sampler's argmax on model-dtype logits (no fp32 copy) and the
# host-path cuts of s20. (1) the engine's CUDA tests (greedy agreement with transformers
# among them); (2) the chat workload at Qwen2.5-0.5B's shape, seed 0 (call 72 gave 0.26 of
# its limit before the logits change); (3) the 4-bit engine's CUDA tests.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call73; mkdir -p "$work"
pack() { tar czf "$OUT/call73.tgz" -C /tmp call73; }
cp "$0" "$work/command.sh"
timeout 240 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  > "$work/engine_tests.log" 2>&1
echo "engine GPU tests exit $?"; grep -E "near ties|passed|failed" "$work/engine_tests.log" | cut -c1-400; pack
timeout 150 python3 -m benchmarks.gpu.varlen --out "$work" --shape qwen2.5-0.5b --seeds 0 \
  --skip-old-defaults > "$work/varlen_small.log" 2>&1
echo "small model exit $?"; grep -E '^\{"engine"|fraction' "$work/varlen_small.log" | cut -c1-800
pack
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_quantized_cuda.py \
  -k "4bit or w4a16" > "$work/quantized_tests.log" 2>&1
echo "4-bit GPU tests exit $?"; tail -3 "$work/quantized_tests.log"; pack
