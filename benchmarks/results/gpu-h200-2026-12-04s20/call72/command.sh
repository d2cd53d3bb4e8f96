#!/usr/bin/env bash
# Session s20, ~480 s: the host-path cuts of s20 (output processor, young-GC threshold,
# scheduler loop) on the H200. (1) the async-scheduling GPU tests; (2) host work per
# decode step, Llama-3-8B shape, batch 256, context 512, streamed outputs; (3) the same at
# Qwen2.5-0.5B's shape; (4) the chat workload at Qwen2.5-0.5B's shape, seed 0; (5) a
# chat-like mixed step at Qwen2.5-0.5B's shape, profiled; (6) any model files on disk.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call72; mkdir -p "$work"
pack() { tar czf "$OUT/call72.tgz" -C /tmp call72; }
cp "$0" "$work/command.sh"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_async_scheduling_cuda.py \
  > "$work/async_tests.log" 2>&1
echo "async GPU tests exit $?"; tail -2 "$work/async_tests.log"; pack
timeout 120 python3 -m benchmarks.gpu.host_profile --layers 32 --batch 256 --context 512 \
  --out "$work/host" > "$work/host_profile.log" 2>&1
echo "host profile exit $?"; grep -v "^ " "$work/host_profile.log" | head -6 | cut -c1-400; pack
timeout 150 python3 -m benchmarks.gpu.varlen --out "$work" --shape qwen2.5-0.5b --seeds 0 \
  --skip-old-defaults > "$work/varlen_small.log" 2>&1
echo "small model exit $?"; grep -E '^\{"engine"|fraction' "$work/varlen_small.log" | cut -c1-800
pack
timeout 100 python3 -m benchmarks.gpu.host_profile --shape qwen2.5-0.5b --batch 256 \
  --context 512 --out "$work/host_small" > "$work/host_profile_small.log" 2>&1
echo "small host profile exit $?"; grep -v "^ " "$work/host_profile_small.log" | head -6 | cut -c1-400
pack
timeout 100 python3 -m benchmarks.gpu.mixed_step --shape qwen2.5-0.5b --decodes 160 \
  --context 800 --prompts 20 --prompt 700 --max-model-len 4096 --repeats 2 --top 25 \
  --out "$work/mixed_small" > "$work/mixed_step_small.log" 2>&1
echo "small mixed step exit $?"; grep -E "^summary|^\{" "$work/mixed_step_small.log" | cut -c1-300
head -32 "$work/mixed_small/mixed_step_profile_mixed.txt" 2>/dev/null | cut -c1-160; pack
timeout 30 find / -xdev \( -name "*.safetensors" -o -name "*.gguf" -o -name "pytorch_model*.bin" \) \
  -size +20M 2>/dev/null | head -20 > "$work/model_files.txt"
echo "model files on disk:"; cat "$work/model_files.txt"; pack
