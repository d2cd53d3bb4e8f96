#!/usr/bin/env bash
# 2026-12-02 s9 call 20 (carry .serve-bench; issues 14, 20): call 19's mixed_graphs check
# (CUDA tests, then a 512-token prompt joining 20 decodes of the 8B shape with this GPU's
# defaults and with mixed_graphs), then issue 14's four serving loads with mixed_graphs on
# in both the server and the in-process comparator (KUBELLM_KERNEL_SWITCHES). Call 18
# (same loads, defaults) met 7 of 9: TPOT at 64@16 +0.54 ms and at 512@64 +1.14 ms, where
# engine-core steps of 20-46 ms (prefills joining decodes, eager) set the decodes' gaps.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD timeout 110 python3 -m pytest -q -x \
  -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py -k mixed_step \
  > "$OUT/gpu_tests.log" 2>&1; echo "mixed-graph GPU tests exit $?"; tail -4 "$OUT/gpu_tests.log"
for switches in "" mixed_graphs; do
  PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD timeout 75 python3 -m benchmarks.gpu.mixed_step \
    --repeats 5 --kernel-switches "$switches" --out "$OUT/mixed_step_${switches:-defaults}" \
    > "$OUT/mixed_step_${switches:-defaults}.log" 2>&1
  echo "mixed_step ${switches:-defaults} exit $?"; grep -E "^summary|median" \
    "$OUT/mixed_step_${switches:-defaults}.log" | cut -c1-300 | tail -4
done
KUBELLM_KERNEL_SWITCHES=mixed_graphs timeout $(( 590 - SECONDS )) bash benchmarks/serving/run_h200.sh \
  "$OUT/serve" .serve-bench/tokenizer .serve-bench/whl \
  -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 --max-num-seqs 256 \
  --api-server-count 4 --client-processes 4 > "$OUT/serve_run.log" 2>&1
echo "serving exit $?"
grep -E "^(http|in-process)|target|vs in process|Error|error" "$OUT/serve_run.log" | cut -c1-300 | tail -16
echo "late compiles: $(grep -c 'after startup' "$OUT/serve_run.log")"
