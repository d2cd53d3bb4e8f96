#!/usr/bin/env bash
# 2026-12-02 call 5: W on a fresh engine with this GPU's default switches (the first W,
# which call 4 ran but whose file did not come back), then the off/on A/B again.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 140 python3 -m benchmarks.gpu.workload_w --skip-sweep \
  --switch-ab prefill_attention,prefill_attention_tma --out "$OUT" 2>&1 \
  | grep -E "kubellm W|switch A/B|decode_batch256|Error|error" | cut -c1-600
