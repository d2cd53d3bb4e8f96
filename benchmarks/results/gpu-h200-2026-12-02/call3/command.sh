#!/usr/bin/env bash
# 2026-12-02 call 3: the engine with this GPU's default switches (TMA prefill kernel on
# Hopper) against transformers, then the w4a16 benchmark (kernel part with the 8-bit and
# zeros+cast probes; bf16 and 4-bit engines: decode batch 1-256 and workload W).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
timeout 150 python3 -m pytest -m gpu tests/gpu/test_engine_cuda.py tests/kernels/test_prefill_attention.py \
  -k "(top5_agreement_with_transformers and llama3 and graphs) or test_gpu_mixed_batch" -v -p no:cacheprovider \
  > "$OUT/gpu_tests.log" 2>&1; grep -E "PASS|FAIL|ERROR|passed|failed" "$OUT/gpu_tests.log" | tail -12
timeout 400 python3 -m benchmarks.gpu.w4a16 --engines 4bit --out "$OUT" > "$OUT/w4a16.log" 2>&1
tail -30 "$OUT/w4a16.log"
