#!/usr/bin/env bash
# 2026-12-02 s8 call 19 (issues 14, 20; for the next session): the mixed_graphs switch,
# written without a GPU this session. First its CUDA tests (graphs captured per token
# count, top-5 agreement with transformers), then a 512-token prompt joining 20 decodes
# of the 8B shape (calls 11-13: 25-46 ms of device time for ~13 ms of kernels, eager)
# with this GPU's defaults and with mixed_graphs. If it wins, make it a Hopper default
# (kernel_switches.hardware_defaults) and run the serving loads (call 18) with it.
# About 300 s.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
timeout 120 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  -k mixed_step > "$OUT/gpu_tests.log" 2>&1; echo "mixed-graph GPU tests exit $?"
tail -4 "$OUT/gpu_tests.log"
for switches in "" mixed_graphs; do
  timeout 80 python3 -m benchmarks.gpu.mixed_step --repeats 5 --kernel-switches "$switches" \
    --out "$OUT/mixed_step_${switches:-defaults}" > "$OUT/mixed_step_${switches:-defaults}.log" 2>&1
  echo "mixed_step ${switches:-defaults} exit $?"; grep -E "^summary|median" \
    "$OUT/mixed_step_${switches:-defaults}.log" | cut -c1-300 | tail -4
done
