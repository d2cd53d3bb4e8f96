#!/usr/bin/env bash
# Session s26, ~300 s, unrun (no machine lent in s26). Supersedes s25's call 101 (unrun).
# Before the call, on the development machine:
#   bash benchmarks/serving/prepare_serve_bench.sh        # .serve-bench: the msgspec wheel
#   rm -rf .ab-base && mkdir .ab-base && git archive 4c7a708 runtime kernels \
#     benchmarks/common benchmarks/cpu benchmarks/gpu | tar -x -C .ab-base
# and carry [".serve-bench", ".ab-base"]. 4c7a708 is s25's last commit: the base that
# s26's host-path cuts (steady rows' deltas, on_launch) are measured against.
#  1. the engine core's host work per step at batch 256 on the H200 machine's host (its
#     CPU, CPU clock, delta rows and encoding as `kubellm serve`'s core does), this tree
#     against the base, three interleaved pairs; since s26 the figures count the block
#     tables' list and on_launch as scheduling (so the base, timed by its own engine,
#     leaves ~0.1 ms out that this tree counts);
#  2. the same on the GPU path (benchmarks.gpu.host_profile --core-encoding, 32 layers,
#     batch 256, context 512, 128 steps): this tree, then the base with this tree's
#     host_profile.py copied in (the base's has no --core-encoding).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call102; mkdir -p "$work"
pack() { tar czf "$OUT/call102.tgz" -C /tmp call102; }
cp "$0" "$work/command.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site-msgspec .serve-bench/whl/msgspec-*.whl > "$work/pip.log" 2>&1
echo "msgspec wheel exit $?"
here=$PWD; base=$PWD/.ab-base
cp benchmarks/cpu/host_overhead.py "$base/benchmarks/cpu/host_overhead.py"
cp benchmarks/gpu/host_profile.py "$base/benchmarks/gpu/host_profile.py"
tree_path() { echo "$1/runtime:$1/kernels:$here/operator:$1:/tmp/site-msgspec"; }
lscpu | grep -E "Model name|MHz" > "$work/host.txt"
stages=${STAGES:-cpu gpu}   # STAGES=cpu: part 1 alone (how it was checked off the GPU)
[[ $stages == *cpu* ]] && for round in 1 2 3; do
  for side in base head; do
    dir=$here; [ $side = base ] && dir=$base
    (cd "$dir" && PYTHONPATH=$(tree_path "$dir") OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES= \
      timeout 120 python3 -m benchmarks.cpu.host_overhead --batch 256 --steps 256 \
      --clock cpu --core-encoding) > "$work/cpu_${side}_$round.log" 2>&1
    echo "cpu $side round $round exit $?: $(tail -1 "$work/cpu_${side}_$round.log" | cut -c1-400)"
  done
  pack
done
[[ $stages == *gpu* ]] && for side in head base; do
  dir=$here; [ $side = base ] && dir=$base
  (cd "$dir" && PYTHONPATH=$(tree_path "$dir") timeout 200 python3 -m benchmarks.gpu.host_profile \
    --layers 32 --batch 256 --context 512 --steps 128 --core-encoding \
    --out "$work/gpu_$side") > "$work/gpu_$side.log" 2>&1
  echo "gpu $side exit $?"; tail -2 "$work/gpu_$side.log" | cut -c1-500; pack
done
