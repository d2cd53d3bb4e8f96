#!/usr/bin/env bash
# s13, ~200 s: each 4-bit GEMV config alone (benchmarks/gpu/gemv_configs.py): compile
# seconds and device time at the five Llama-3-8B shapes x 1, 2, 4 rows, and the fewest
# configs within 3% of the best everywhere. Call 33: autotuning its 17 configs took 62 s
# at one row and 160 s at four, the 4-bit engine tests ran past 330 s.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call34; mkdir -p "$work"
pack() { tar czf "$OUT/call34.tgz" -C /tmp call34; }
timeout 250 python3 -m benchmarks.gpu.gemv_configs --out "$work" > "$work/gemv_configs.log" 2>&1
echo "gemv_configs exit $?"; grep -v "^gemv_configs " "$work/gemv_configs.log" | tail -40; pack
