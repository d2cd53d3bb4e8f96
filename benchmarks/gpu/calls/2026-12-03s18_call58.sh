#!/usr/bin/env bash
# Session s18, ~500 s: what s17 left unrun on the final paged kernel (2953119) and where a
# decode step's time goes now. (1) every paged-attention GPU test; (2) the decode
# attention over the chat workload's batches, W-like, and equal long contexts (64 and
# 256 x 4,096; 64 x 16,384); (3) the decode step at batch 1 and 256 by kernel
# (decode_ablation, with the current defaults); (4) host work per decode step at batch
# 256, three times on one engine (issue 20: <= 1 ms; last measured in s10).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call58; mkdir -p "$work"
pack() { tar czf "$OUT/call58.tgz" -C /tmp call58; }
cp "$0" "$work/command.sh"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_paged_attention.py \
  > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; tail -2 "$work/gpu_tests.log"; pack
timeout 120 python3 -m benchmarks.kernels.bench_decode_long_tail --out "$work" > "$work/long_tail.log" 2>&1
echo "long tail exit $?"; grep -v "^    " "$work/long_tail.log" | tail -12; pack
timeout 200 python3 -m benchmarks.gpu.decode_ablation --batches 1,256 --out "$work" \
  > "$work/decode_ablation.log" 2>&1; echo "ablation exit $?"
python3 - "$work/decode_ablation.json" <<'PY' 2>&1 | tee "$work/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
print("floors", json.dumps(d["floors"]))
for v in d["variants"]:
    print(v["variant"], v.get("batch1_ms"), v.get("batch256_ms"))
for name in ("profile_defaults", "profile_all"):
    p = d[name]
    print(name, p.get("batch"), "by part ms", json.dumps(p["by_part_ms"]))
    for k in p["top_kernels"][:16]:
        print(f'  {k["ms_per_step"]:8.4f} {k["category"]:10s} {k["kernel"][:90]}')
print("gemms", json.dumps(d["gemms"]))
PY
pack
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
pack
