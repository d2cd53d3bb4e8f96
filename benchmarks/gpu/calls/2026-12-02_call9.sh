#!/usr/bin/env bash
# 2026-12-02 call 9 (carry .serve-bench): the one-kernel W4A16 decode GEMM's GPU tests (the
# new default: workspace + last-program epilogue, in CUDA graphs; the old path at a real
# shape), then issue 14's four serving loads with the engine core's heap frozen after
# startup and the trace's step durations and GC pauses.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD timeout 110 python3 -m pytest -m gpu -p no:cacheprovider -v \
  tests/kernels/test_w4a16_gemm.py tests/gpu/test_quantized_cuda.py \
  -k "(every_variant and dot-zeros) or in_cuda_graphs" > "$OUT/w4a16_tests.log" 2>&1
grep -E "PASS|FAIL|ERROR|passed|failed" "$OUT/w4a16_tests.log" | tail -8
timeout 440 bash benchmarks/serving/run_h200.sh "$OUT" .serve-bench/tokenizer .serve-bench/whl \
  -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 --max-num-seqs 256 \
  --api-server-count 4 --trace-dir /tmp/serve_trace > "$OUT/serve_run.log" 2>&1
grep -E "^(http|in-process)|target|vs in process|Error|error" "$OUT/serve_run.log" | cut -c1-400 | tail -30
PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD python3 -m benchmarks.serving.arrival_trace /tmp/serve_trace \
  > "$OUT/arrivals.txt" 2>&1; cat "$OUT/arrivals.txt"
echo "late compiles: $(grep -c 'after startup' "$OUT/serve_run.log")"
tar czf "$OUT/serve_trace.tgz" -C /tmp serve_trace
