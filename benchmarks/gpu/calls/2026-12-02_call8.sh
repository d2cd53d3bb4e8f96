#!/usr/bin/env bash
# 2026-12-02 call 8 (carry .serve-bench): as call 7, the attention kernels no longer specialising on
# the metadata slices' alignment, and connections pre-opened for the first 2 s only;
# issue 14's four serving loads, each
# on prompts of its own, with the benchmark client's pooled connections (opened before
# each load's timing), 4 API servers, and the arrival trace.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/gpu/test_compile_watch_cuda.py tests/kernels/test_prefill_attention.py -k "compile or odd_number" 2>&1 | tail -3
timeout 480 bash benchmarks/serving/run_h200.sh "$OUT" .serve-bench/tokenizer .serve-bench/whl \
  -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 --max-num-seqs 256 \
  --api-server-count 4 --trace-dir /tmp/serve_trace > "$OUT/serve_run.log" 2>&1
grep -E "^(http|in-process)|target|vs in process|Error|error" "$OUT/serve_run.log" | cut -c1-400 | tail -30
PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD python3 -m benchmarks.serving.arrival_trace /tmp/serve_trace \
  > "$OUT/arrivals.txt" 2>&1; head -60 "$OUT/arrivals.txt"
echo "late compiles: $(grep -c 'after startup' "$OUT/serve_run.log")"
grep 'after startup' "$OUT/serve_run.log" | cut -c1-330 | head -20
tar czf "$OUT/serve_trace.tgz" -C /tmp serve_trace
