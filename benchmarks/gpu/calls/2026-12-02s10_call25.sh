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
timeout $(( 570 - SECONDS )) bash benchmarks/serving/run_h200.sh \
  "$work/serve" .serve-bench/tokenizer .serve-bench/whl \
  -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 --max-num-seqs 256 \
  --api-server-count 4 --client-processes 4 --repeats 3 > "$work/serve_run.log" 2>&1
echo "serving exit $?"
grep -E "vs in process|target|Error" "$work/serve_run.log" | cut -c1-400 | tail -14
echo "late compiles: $(grep -c 'after startup' "$work/serve_run.log")"
tar czf "$OUT/call25.tgz" -C "$work" .
