#!/usr/bin/env bash
# 2026-12-02 s7 call 14 (carry .serve-bench; issue 14): GPU tests of the new defaults (fused
# rotary + KV write on Hopper, the prefill kernel only for chunks of 2,048+ tokens, no
# split-KV for a mixed step's decodes), then the four serving loads as in call 10.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD timeout 110 python3 -m pytest -m gpu \
  tests/gpu/test_engine_cuda.py -k "top5 or 32k" -p no:cacheprovider -q > "$OUT/gpu_tests.log" 2>&1
grep -E "passed|failed|FAIL|Error" "$OUT/gpu_tests.log" | tail -6
timeout 440 bash benchmarks/serving/run_h200.sh "$OUT" .serve-bench/tokenizer .serve-bench/whl \
  -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 --max-num-seqs 256 \
  --api-server-count 4 --trace-dir /tmp/serve_trace > "$OUT/serve_run.log" 2>&1
grep -E "^(http|in-process)|target|vs in process|Error|error" "$OUT/serve_run.log" | cut -c1-400 | tail -30
PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD python3 -m benchmarks.serving.arrival_trace /tmp/serve_trace \
  > "$OUT/arrivals.txt" 2>&1; head -c 3000 "$OUT/arrivals.txt"
echo "late compiles: $(grep -c 'after startup' "$OUT/serve_run.log")"
tar czf "$OUT/serve_trace.tgz" -C /tmp serve_trace
