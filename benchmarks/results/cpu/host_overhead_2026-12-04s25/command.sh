#!/usr/bin/env bash
# Session s25: the scheduler's steady decode plan (f7e8368) against the commit before it
# (803cc2f), and on / off in one checkout with prompts of spread lengths; batch 256, one
# thread, CPU clock, interleaved.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
out=benchmarks/results/cpu/host_overhead_2026-12-04s25
PYTHON=$PWD/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh 803cc2f f7e8368 3 -- \
  --batch 256 --steps 256 > "$out/ab_803cc2f_f7e8368.log" 2>&1
for round in 1 2 3; do
  for flag in "" --no-steady-decode; do
    OMP_NUM_THREADS=1 python -m benchmarks.cpu.host_overhead --batch 256 --steps 256 \
      --clock cpu --context-spread $flag 2>/dev/null | tail -1
  done
done > "$out/spread_on_off.jsonl"
