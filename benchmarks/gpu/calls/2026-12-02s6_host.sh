#!/usr/bin/env bash
# 2026-12-02 s6 (branch s6-host, issue 20 item 5): the host work per decode step at W's
# decode point (Llama-3-8B shape, batch 256, context 512, the GPU path), final and
# cumulative outputs, with the startup heap frozen as the engine core process now does;
# then the CPU benchmark on this host's CPU (it now runs the engine on the CPU whatever
# the host has). Under 120 s: one engine, 64 timed steps per kind.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 85 python3 - <<'PY' 2>&1 | grep -E "^decode|Error|error" | cut -c1-600 | tee "$OUT/decode_host.txt"
import tempfile
from pathlib import Path
from benchmarks.gpu import workload_w as w
from kubellm.runtime.core.gc_heap import freeze_startup_heap
llm, _ = w.make_llm(w.write_config(w.SHAPE, Path(tempfile.mkdtemp()) / "model"))
freeze_startup_heap()
for kind in ("final_only", "cumulative"):
    print("decode", w.decode_rate(llm, 256, 512, steps=64, output_kind=kind), flush=True)
import gc
gc.unfreeze()
PY
for kind in final_only cumulative; do
  OMP_NUM_THREADS=1 timeout 15 python3 -m benchmarks.cpu.host_overhead --steps 128 \
    --output-kind $kind --clock cpu 2>&1 | tail -1 | tee -a "$OUT/host_overhead.txt"
done
