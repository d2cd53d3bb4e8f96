#!/usr/bin/env bash
# call 4: where the host time of a small model's decode step goes on the H200 machine:
# the CPU host-overhead benchmark on its CPU (same code as ours, comparable figures), then
# the Qwen2.5-0.5B chat run of benchmarks/gpu/varlen.py with cProfile around the timed run
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
for kind in final_only cumulative; do
  OMP_NUM_THREADS=1 timeout 90 python3 -m benchmarks.cpu.host_overhead --steps 128 \
    --output-kind $kind --clock cpu 2>&1 | grep -v Warn | tail -8 > "$OUT/host_overhead_$kind.txt"
done
cat "$OUT"/host_overhead_*.txt
timeout 240 python3 - <<'PY' 2>&1 | grep -v Warn | tail -5
import cProfile, os, pstats, sys
import benchmarks.gpu.varlen as V
out, orig = os.environ["OUT"], V.run
def run(*a, **k):
    prof = cProfile.Profile()
    prof.enable()
    try:
        return orig(*a, **k)
    finally:
        prof.disable()
        with open(out + "/small_model_profile.txt", "w") as f:
            s = pstats.Stats(prof, stream=f)
            s.sort_stats("tottime").print_stats(45)
            s.sort_stats("cumulative").print_stats(45)
V.run = run
sys.argv = ["varlen", "--out", out, "--shape", "qwen2.5-0.5b", "--seeds", "0", "--skip-old-defaults"]
sys.exit(V.main())
PY
head -75 "$OUT/small_model_profile.txt" | cut -c1-160
