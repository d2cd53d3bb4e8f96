#!/usr/bin/env bash
# Not run in s10: the device budget could not start another machine (287 s left).
# 2026-12-02 s10 call 28: the engine's CUDA tests after this session's host-path change
# (the runner hands a steady decode's sampling states list on; the sampler keeps what its
# parameters say): top-5 agreement with transformers (eager, graphs, each switch, mixed
# graphs), the 32k prompt, the hardware-aware defaults, async scheduling against waiting.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 210 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  tests/gpu/test_async_scheduling_cuda.py > "$OUT/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; grep -E "^FAILED|passed|failed" "$OUT/gpu_tests.log" | tail -8
