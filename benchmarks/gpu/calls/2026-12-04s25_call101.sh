#!/usr/bin/env bash
# Session s25, ~200 s, unrun (no machine lent in s25): s24's call 100 again, with msgspec
# this time. Carry .serve-bench (bash benchmarks/serving/prepare_serve_bench.sh): its
# msgspec wheel is installed apart, in /tmp/site-msgspec (the machine has no package
# index; call 100 stopped at `import msgspec`). Then:
#  1. the engine core's host work per step at batch 256 on the H200 machine's host (its
#     CPU, CPU clock), s24's delta rows against --no-delta-rows (every output built and
#     encoded, as before s24), three interleaved pairs;
#  2. the engine's host work on the GPU path (benchmarks.gpu.host_profile, 32 layers,
#     batch 256, context 512, streamed outputs), for the same host's figures side by side.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call101; mkdir -p "$work"
pack() { tar czf "$OUT/call101.tgz" -C /tmp call101; }
cp "$0" "$work/command.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site-msgspec .serve-bench/whl/msgspec-*.whl > "$work/pip.log" 2>&1
echo "msgspec wheel exit $?"
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD:/tmp/site-msgspec
lscpu | grep -E "Model name|MHz" > "$work/host.txt"
for round in 1 2 3; do
  for mode in delta_rows no_delta_rows; do
    flag=""; [ $mode = no_delta_rows ] && flag=--no-delta-rows
    OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES= timeout 120 python3 -m benchmarks.cpu.host_overhead \
      --batch 256 --steps 256 --clock cpu --core-encoding $flag > "$work/${mode}_$round.log" 2>&1
    echo "$mode round $round exit $?: $(tail -1 "$work/${mode}_$round.log" | cut -c1-400)"
  done
  pack
done
timeout 240 python3 -m benchmarks.gpu.host_profile --layers 32 --batch 256 --context 512 \
  --steps 128 --out "$work" > "$work/host_profile.log" 2>&1
echo "host_profile exit $?"; tail -5 "$work/host_profile.log" | cut -c1-400; pack
