#!/usr/bin/env bash
# Session s24, ~120 s: why call 96's L2 prefetch slowed small decode steps. At one row, 32
# layers of RMSNorm + GEMV (bf16 cuBLAS and the 4-bit kernel, O and down shapes): does a
# GEMV reuse prefetched bytes (prefetch serial on one stream), and what does a forked
# branch cost alone (a one-line prefetch on a side stream)? benchmarks.gpu.l2_reuse.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call97; mkdir -p "$work"
pack() { tar czf "$OUT/call97.tgz" -C /tmp call97; }
cp "$0" "$work/command.sh"
timeout 400 python3 -m benchmarks.gpu.l2_reuse --out "$work" > "$work/l2_reuse.log" 2>&1
echo "l2_reuse exit $?"; tail -3 "$work/l2_reuse.log" | cut -c1-300
python3 - "$work/l2_reuse.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    u = r["us_per_layer"]
    print(r["kind"], r["gemv"], r["mode"], r["mib"], "plain", u["plain"], "alone", u["alone"],
          "serial", u["serial"], "fork_empty", u["fork_empty"], "fork", u["fork"],
          "reuse", r["reuse_us"], "of", r["prefetch_at_copy_rate_us"], "fork_cost", r["fork_cost_us"])
PY
pack
