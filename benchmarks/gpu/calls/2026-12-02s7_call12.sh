#!/usr/bin/env bash
# 2026-12-02 s7 call 12 (issue 14): call 11 found the step a 512-token prompt joins takes
# 41 ms of device time with the prefill kernel (TMA) against 18 ms with the paged kernel,
# while the profiler counts ~13 ms of kernels: the device waits on the host. cProfile of
# that step with the prefill kernel on (TMA), on without TMA, and off. At most 3 x 130 s.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for sw in "" "prefill_attention_tma=off" "prefill_attention=off"; do
  name=${sw:-default}; name=${name%%=*}
  mkdir -p "$OUT/$name"
  timeout 130 python3 -m benchmarks.gpu.mixed_step --out "$OUT/$name" --kernel-switches "$sw" \
    --repeats 3 --cprofile 45 > "$OUT/$name/log.txt" 2>&1; echo "== $name exit $?"
  grep -E '^\{' "$OUT/$name/log.txt" | cut -c1-300
  grep -A55 "host functions" "$OUT/$name/log.txt" | grep -vE "^\s*$" | cut -c1-170
  grep -iE "error|Traceback" "$OUT/$name/log.txt" | head -5
done
