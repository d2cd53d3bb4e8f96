#!/usr/bin/env bash
# Session s21, ~150 s: call 78's A/B was inside its noise (the same tree's host work moved
# by 1.2-1.5x between runs): the same before/after on that machine's CPU alone, where
# benchmarks.cpu.host_overhead times every phase with the thread's CPU clock (batch 256,
# context 512, streamed and final outputs), trees interleaved, three rounds.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call79; mkdir -p "$work"
pack() { tar czf "$OUT/call79.tgz" -C /tmp call79; }
cp "$0" "$work/command.sh"
for round in 1 2 3; do
  for kind in cumulative final_only; do
    for tree in base new; do
      root=$PWD; [ "$tree" = base ] && root=$PWD/ab_base
      line=$(PYTHONPATH=$root/runtime:$root/kernels:$PWD timeout 90 python3 -m \
        benchmarks.cpu.host_overhead --clock cpu --steps 128 --output-kind $kind 2>&1 | tail -1)
      echo "$tree $round $line" | tee -a "$work/ab.txt"
    done
  done
done
pack
