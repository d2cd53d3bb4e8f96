#!/usr/bin/env bash
# 2026-12-02 s7 call 16 (carry .serve-bench; issue 14): the serving benchmark's client
# alone on the H200 host's CPUs: how long a 64-request burst takes to reach a server with
# the client in 1, 2, 4 and 8 processes (no GPU work). At most 70 s.
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .serve-bench/whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/runtime:$PWD/kernels:$PWD
nproc
timeout 60 python3 -m benchmarks.serving.client_dispatch --processes 1,2,4,8 --repeats 15 \
  --out "$OUT" 2>&1 | tail -8
