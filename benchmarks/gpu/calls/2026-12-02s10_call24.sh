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
bash benchmarks/gpu/calls/issue14_serving_loads.sh "$work" $(( 570 - SECONDS ))
tar czf "$OUT/call24.tgz" -C "$work" .
