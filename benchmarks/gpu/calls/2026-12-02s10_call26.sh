#!/usr/bin/env bash
# 2026-12-02 s10 call 26 (issue 20 item 5): where the GPU path's host work per decode step
# goes at batch 256 / context 512 (final_only: 0.944 and 1.045 ms in call 22 against the
# <= 1 ms target; the same code on the CPU path: 0.54 ms, its prepare 0.16 ms against
# 0.40-0.44 on the GPU path). The rate unprofiled, then cProfile over 64 steps (tottime
# and cumulative). About 90 s.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 150 python3 - > "$OUT/host_profile.txt" 2>&1 <<'PY'
import cProfile, pstats, tempfile
from pathlib import Path
from benchmarks.gpu import workload_w as w
from kubellm.runtime.core.gc_heap import freeze_startup_heap
llm, _ = w.make_llm(w.write_config(w.SHAPE, Path(tempfile.mkdtemp()) / "model"))
freeze_startup_heap()
print("decode", w.decode_rate(llm, 256, 512, steps=64, output_kind="final_only"), flush=True)
from kubellm.runtime.cli.bench import steady
prof, time_steps = cProfile.Profile(), steady.time_steps

def profiled(engine, steps):   # the timed steps only, not the fill before them
    prof.enable()
    try:
        return time_steps(engine, steps)
    finally:
        prof.disable()
steady.time_steps = profiled
print("decode profiled", w.decode_rate(llm, 256, 512, steps=64, output_kind="final_only"))
stats = pstats.Stats(prof)
stats.sort_stats("tottime").print_stats(45)
stats.sort_stats("cumulative").print_stats(45)
PY
echo "exit $?"; grep -E "^decode" "$OUT/host_profile.txt" | cut -c1-500
