#!/usr/bin/env bash
# Host work per decode step of two commits, side by side on this machine:
#   bash benchmarks/cpu/ab_host_overhead.sh BEFORE [AFTER=HEAD] [ROUNDS=3] [-- host_overhead flags]
# Both commits run from git worktrees under /tmp (the same filesystem and directory depth:
# on this machine a run from the repository's own folder measured slower post-processing
# than the identical code from /tmp), alternating, with this checkout's
# benchmarks/cpu/host_overhead.py (so an old commit gets today's flags), one thread, CPU
# clock. Prints one JSON line per run, prefixed with the side, then the medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
before=${1:?usage: ab_host_overhead.sh BEFORE [AFTER] [ROUNDS] [-- flags]}
after=${2:-HEAD}; rounds=${3:-3}
shift $(( $# < 3 ? $# : 3 )); [ "${1:-}" = "--" ] && shift
flags=("$@"); [ ${#flags[@]} -eq 0 ] && flags=(--steps 128)
bench=$PWD/benchmarks/cpu/host_overhead.py
python=${PYTHON:-python3}
trees=()
cleanup() { for t in "${trees[@]}"; do git worktree remove --force "$t" >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
for side in before after; do
  tree=$(mktemp -d /tmp/ab-$side.XXXXXX); rmdir "$tree"
  git worktree add -q --detach "$tree" "$([ $side = before ] && echo "$before" || echo "$after")"
  cp "$bench" "$tree/benchmarks/cpu/host_overhead_ab.py"
  trees+=("$tree")
done
results=$(mktemp)
for _ in $(seq "$rounds"); do
  for i in 0 1; do
    tree=${trees[$i]}; side=$([ $i = 0 ] && echo before || echo after)
    line=$(cd "$tree" && PYTHONPATH=$tree/runtime:$tree/kernels:$tree OMP_NUM_THREADS=1 \
      "$python" -m benchmarks.cpu.host_overhead_ab --clock cpu "${flags[@]}" 2>/dev/null | tail -1)
    echo "$side $line" | tee -a "$results"
  done
done
"$python" - "$results" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    side, _, text = line.partition(" ")
    for key, value in json.loads(text).items():
        if key.endswith("_ms"):
            runs.setdefault(side, {}).setdefault(key, []).append(value)
for side, figures in runs.items():
    print(side, "median", json.dumps({k: round(statistics.median(v), 3) for k, v in figures.items()}))
PY
