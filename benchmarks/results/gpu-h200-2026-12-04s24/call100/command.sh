#!/usr/bin/env bash
# Session s24, ~150 s, CPU only: the engine core's host work per step at batch 256 on an
# H200 machine's host (its CPU, CPU clock), with s24's delta rows and without
# (--no-delta-rows: every output built and encoded, as before), three interleaved pairs.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call100; mkdir -p "$work"
pack() { tar czf "$OUT/call100.tgz" -C /tmp call100; }
cp "$0" "$work/command.sh"
lscpu | grep -E "Model name|MHz" > "$work/host.txt"
for round in 1 2 3; do
  for mode in delta_rows no_delta_rows; do
    flag=""; [ $mode = no_delta_rows ] && flag=--no-delta-rows
    timeout 120 python3 -m benchmarks.cpu.host_overhead --batch 256 --steps 256 --clock cpu \
      --core-encoding $flag > "$work/${mode}_$round.log" 2>&1
    echo "$mode round $round exit $?: $(tail -1 "$work/${mode}_$round.log" | python3 -c "
import json, sys
r = json.loads(sys.stdin.read())
print({k: r[k] for k in ('schedule_ms', 'prepare_ms', 'postprocess_ms', 'core_encode_ms', 'core_ms')})")"
  done
  pack
done
