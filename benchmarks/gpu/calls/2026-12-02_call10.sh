#!/usr/bin/env bash
# 2026-12-02 call 10 (carry .serve-bench): issue 14's four serving loads with the startup heap frozen in
# the engine core, the API servers and the in-process comparator alike, and the trace.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
timeout 440 bash benchmarks/serving/run_h200.sh "$OUT" .serve-bench/tokenizer .serve-bench/whl \
  -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 --max-num-seqs 256 \
  --api-server-count 4 --trace-dir /tmp/serve_trace > "$OUT/serve_run.log" 2>&1
grep -E "^(http|in-process)|target|vs in process|Error|error" "$OUT/serve_run.log" | cut -c1-400 | tail -30
PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD python3 -m benchmarks.serving.arrival_trace /tmp/serve_trace \
  > "$OUT/arrivals.txt" 2>&1; cat "$OUT/arrivals.txt"
echo "late compiles: $(grep -c 'after startup' "$OUT/serve_run.log")"
tar czf "$OUT/serve_trace.tgz" -C /tmp serve_trace
