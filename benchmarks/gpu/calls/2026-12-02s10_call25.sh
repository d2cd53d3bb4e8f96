#!/usr/bin/env bash
# 2026-12-02 s10 call 25 (carry .serve-bench; issues 14, 16): (1) the FP8 CUDA tests after
# the scale fix (row max times the fp32 reciprocal of 448, as torch on CUDA computes
# "/ 448"; call 23's kernel divided and missed the CUDA reference by a code at some rows)
# with fp8_quant_kernel now on by default on Hopper; (2) issue 14's four serving loads
# three times over after two front-end/core cuts: bodies <= 8 KiB prepared on the event
# loop (no thread hop) and the core's token-id check at C speed. Outputs tarred.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call25; mkdir -p "$work"
PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD timeout 150 python3 -m pytest -q \
  -p no:cacheprovider -m gpu tests/kernels/test_fp8_quant.py tests/gpu/test_quantized_cuda.py \
  -k "fp8" > "$work/gpu_tests.log" 2>&1; echo "fp8 GPU tests exit $?"
grep -E "^FAILED|passed|failed|differ" "$work/gpu_tests.log" | cut -c1-400 | tail -8
bash benchmarks/gpu/calls/issue14_serving_loads.sh "$work" $(( 570 - SECONDS ))
tar czf "$OUT/call25.tgz" -C "$work" .
