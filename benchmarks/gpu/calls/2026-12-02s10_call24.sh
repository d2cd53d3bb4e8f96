#!/usr/bin/env bash
# 2026-12-02 s10 call 24 (carry .serve-bench; issue 14): the four serving loads, three
# repeats each (targets on the medians), after s9's idle-core burst rule (the first step
# starts once the burst fills the steps planned before it lands) and the cheaper
# prepare(). Call 21 met 8 of 9; the miss was 64@inf TTFT +12.5 ms (want <= +10).
# Outputs tarred: the device tool returns at most 8 files.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call24; mkdir -p "$work"
git rev-parse --short HEAD > "$work/commit.txt" 2>/dev/null
timeout $(( 570 - SECONDS )) bash benchmarks/serving/run_h200.sh \
  "$work/serve" .serve-bench/tokenizer .serve-bench/whl \
  -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 --max-num-seqs 256 \
  --api-server-count 4 --client-processes 4 --repeats 3 > "$work/serve_run.log" 2>&1
echo "serving exit $?"
grep -E "vs in process|target|Error" "$work/serve_run.log" | cut -c1-400 | tail -14
echo "late compiles: $(grep -c 'after startup' "$work/serve_run.log")"
tar czf "$OUT/call24.tgz" -C "$work" .
