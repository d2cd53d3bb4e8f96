#!/usr/bin/env bash
# 2026-12-02 s10 call 27 (issue 20): (1) where a batch-1 decode step's device time goes
# (issue 20: ITL within 10% of the weight-read floor; call 23's bf16 engine: 4.72 ms a
# step against ~3.56 ms of weight reads) -- the torch profiler's kernels by part against
# each part's floor, and the decode GEMMs alone against their roofline at one row;
# (2) the host work per decode step at batch 256, final outputs, three times on one engine
# (calls 22 and 26: 0.944, 1.045 and 1.538 ms), to tell the spread. About 180 s.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call27; mkdir -p "$work"
timeout 200 python3 -m benchmarks.gpu.decode_ablation --batches 1 --out "$work" \
  > "$work/decode_ablation.log" 2>&1; echo "ablation exit $?"
python3 - "$work/decode_ablation.json" <<'PY' 2>&1 | tee "$work/batch1_summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
print("floors", json.dumps(d["floors"]))
for v in d["variants"]:
    print(v["variant"], v.get("batch1_ms"), v.get("batch1_pieces_ms", ""))
p = d["profile_defaults"]
print("by part ms", json.dumps(p["by_part_ms"]))
for k in p["top_kernels"][:14]:
    print(f'  {k["ms_per_step"]:8.4f} {k["category"]:10s} {k["kernel"][:90]}')
print("gemms", json.dumps(d["gemms"])[:1500])
PY
timeout 150 python3 - > "$work/host_repeats.txt" 2>&1 <<'PY'
import tempfile
from pathlib import Path
from benchmarks.gpu import workload_w as w
from kubellm.runtime.core.gc_heap import freeze_startup_heap
llm, _ = w.make_llm(w.write_config(w.SHAPE, Path(tempfile.mkdtemp()) / "model"))
freeze_startup_heap()
for _ in range(3):
    print("decode", w.decode_rate(llm, 256, 512, steps=64, output_kind="final_only"), flush=True)
PY
echo "host exit $?"; grep -E "^decode" "$work/host_repeats.txt" | cut -c1-420
tar czf "$OUT/call27.tgz" -C "$work" .
