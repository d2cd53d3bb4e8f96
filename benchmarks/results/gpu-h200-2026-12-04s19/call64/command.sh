#!/usr/bin/env bash
# Session s19, ~330 s: where the chat workload's mixed steps and a decode step's host work
# go. (1) A chat-like mixed step: 160 decodes of 800 keys, 12 prompts of 700 tokens
# arriving together (8,192 batched tokens), timed and profiled by kernel; (2) the host
# work per decode step at batch 256 under cProfile (async scheduling on and off);
# (3) the chat workload on Qwen2.5-0.5B (issue 20's small real shape; last run 2026-12-01).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call64; mkdir -p "$work"
pack() { tar czf "$OUT/call64.tgz" -C /tmp call64; }
cp "$0" "$work/command.sh"
timeout 130 python3 -m benchmarks.gpu.mixed_step --decodes 160 --context 800 --prompts 12 \
  --prompt 700 --max-model-len 4096 --repeats 3 --top 30 --out "$work/mixed" \
  > "$work/mixed_step.log" 2>&1
echo "mixed step exit $?"; grep -E "^summary|^\{" "$work/mixed_step.log" | cut -c1-300
head -40 "$work/mixed/mixed_step_profile_mixed.txt" | cut -c1-200; pack
timeout 120 python3 -m benchmarks.gpu.host_profile --layers 32 --batch 256 --context 512 \
  --out "$work/host" > "$work/host_profile.log" 2>&1
echo "host profile exit $?"; grep -v "^ " "$work/host_profile.log" | head -20 | cut -c1-300; pack
timeout 150 python3 -m benchmarks.gpu.varlen --out "$work" --shape qwen2.5-0.5b --seeds 0 \
  --skip-old-defaults > "$work/varlen_small.log" 2>&1
echo "small model exit $?"; grep -E '^\{"engine"|fraction' "$work/varlen_small.log" | cut -c1-700
pack
