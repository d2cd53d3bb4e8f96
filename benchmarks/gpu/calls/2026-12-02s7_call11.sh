#!/usr/bin/env bash
# 2026-12-02 s7 call 11 (issues 14 and 20): where a mixed step's time goes on the H200,
# one 512-token prompt joining 20 decodes of a Llama-3-8B shape (serving calls 8-10 saw
# such steps take 35-73 ms), with the prefill attention kernel on and off; then the host
# work per decode step at W's decode point (s6_host). At most 2 x 150 + 110 s.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for sw in "" "prefill_attention=off"; do
  name=mixed_${sw:-default}; name=${name%%=*}
  mkdir -p "$OUT/$name"
  timeout 150 python3 -m benchmarks.gpu.mixed_step --out "$OUT/$name" --kernel-switches "$sw" \
    --top 25 > "$OUT/$name/log.txt" 2>&1; echo "$name exit $?"
  grep -E '^\{' "$OUT/$name/log.txt" | cut -c1-400
  for f in "$OUT/$name"/mixed_step_profile_*.txt; do echo "== $f"; head -22 "$f" | cut -c1-220; done
  grep -iE "error|Traceback" "$OUT/$name/log.txt" | head -5
done
OUT="$OUT" timeout 110 bash benchmarks/gpu/calls/2026-12-02s6_host.sh
