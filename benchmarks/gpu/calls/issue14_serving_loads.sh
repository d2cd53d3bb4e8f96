#!/usr/bin/env bash
# Issue 14's four serving loads (64@16, 64@inf, 512@64, 512@inf), three repeats each, 4 API
# servers and a client in 4 processes, against the engine in process; the targets on the
# medians. Used by the dated call scripts beside it:
#   bash benchmarks/gpu/calls/issue14_serving_loads.sh WORK_DIR SECONDS_LEFT
# from the repository root, with .serve-bench carried. Writes WORK_DIR/serve_run.log and
# WORK_DIR/serve/ (serve_bench.json, ...); prints the comparison and the targets.
work=${1:?usage: issue14_serving_loads.sh WORK_DIR SECONDS_LEFT}; left=${2:?}
timeout "$left" bash benchmarks/serving/run_h200.sh \
  "$work/serve" .serve-bench/tokenizer .serve-bench/whl \
  -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 --max-num-seqs 256 \
  --api-server-count 4 --client-processes 4 --repeats 3 > "$work/serve_run.log" 2>&1
echo "serving exit $?"
grep -E "vs in process|target|Error" "$work/serve_run.log" | cut -c1-400 | tail -14
echo "late compiles: $(grep -c 'after startup' "$work/serve_run.log")"
