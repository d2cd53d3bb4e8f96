#!/usr/bin/env bash
# s16: the embedded model's decode of one request on one thread, before and after the CPU
# forward dequantized into reused buffers (OLD, NEW: commits), three alternating pairs of
# processes from /tmp worktrees; result.txt holds the run (made from the working tree
# before the commit, the same code). From the repository root, venv active:
#   bash benchmarks/results/cpu/cpu_dequant_2026-12-03s16/command.sh OLD NEW
old=${1:?OLD commit}; new=${2:?NEW commit}
script=$PWD/benchmarks/results/cpu/cpu_dequant_2026-12-03s16/decode_one_request.py
for rev in "$old" "$new"; do git worktree add -f -q "/tmp/dequant_ab_$rev" "$rev"; done
for i in 1 2 3; do
  for rev in "$old" "$new"; do
    echo "$rev"; (cd "/tmp/dequant_ab_$rev" && PYTHONPATH=$PWD/runtime:$PWD/kernels \
      OMP_NUM_THREADS=1 python "$script" | grep "64 tokens")
  done
done
for rev in "$old" "$new"; do git worktree remove --force "/tmp/dequant_ab_$rev"; done
