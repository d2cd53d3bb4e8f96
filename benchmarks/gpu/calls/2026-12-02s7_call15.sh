#!/usr/bin/env bash
# 2026-12-02 s7 call 15 (carry .serve-bench; issues 14, 16): the four serving loads again,
# now that the startup warm-up also tunes the paged kernel's 64-row prefill tile (call 14
# logged its autotuning, 5 compiles of 1.0-1.5 s per process, at the first tiny prompt);
# then the W4A16 GEMM alone: one kernel (dot) against three (dot-zeros), 1-64 rows.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 400 bash benchmarks/serving/run_h200.sh "$OUT" .serve-bench/tokenizer .serve-bench/whl \
  -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 --max-num-seqs 256 \
  --api-server-count 4 --trace-dir /tmp/serve_trace > "$OUT/serve_run.log" 2>&1
grep -E "^(http|in-process)|target|vs in process|Error|error" "$OUT/serve_run.log" | cut -c1-400 | tail -16
PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD python3 -m benchmarks.serving.arrival_trace /tmp/serve_trace \
  > "$OUT/arrivals.txt" 2>&1; grep -E "^burst|step ms" "$OUT/arrivals.txt"
echo "late compiles: $(grep -c 'after startup' "$OUT/serve_run.log")"
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
timeout 100 python3 -m benchmarks.gpu.w4a16 --part kernel --variants dot,dot-zeros --out "$OUT" \
  > "$OUT/w4a16.log" 2>&1; echo "w4a16 kernel exit $?"
python3 - "$OUT/w4a16_kernel.json" <<'PY'
import json, sys
print("k n m | bf16 us | dot (workspace) us | dot-zeros us | dot-zeros/dot")
for r in json.load(open(sys.argv[1]))["gemm"]:
    new, old = r["variants"]["dot"]["us"], r["variants"]["dot-zeros"]["us"]
    print(r["k"], r["n"], r["m"], "|", r["bf16_linear_us"], "|", new, "|", old, "|",
          round(old / new, 3))
PY
tail -3 "$OUT/w4a16.log" | cut -c1-300
