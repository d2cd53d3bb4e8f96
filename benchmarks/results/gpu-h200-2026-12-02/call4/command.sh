#!/usr/bin/env bash
# 2026-12-02 call 4 (carry .serve-bench): the async-scheduling GPU test (the persistent
# decode rows) and the dot-magic W4A16 GPU tests; W with the TMA prefill kernel off/on on
# one engine, and the host work per decode step on the GPU path; the serving loads that
# missed issue 14's targets, with the arrival trace; the dot-magic GEMM against "dot";
# the host work per decode step on this machine's CPU.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
timeout 110 python3 -m pytest -m gpu tests/gpu/test_async_scheduling_cuda.py tests/kernels/test_w4a16_gemm.py \
  -k "run_ahead_matches or magic" -v -p no:cacheprovider \
  > "$OUT/gpu_tests.log" 2>&1; grep -E "PASS|FAIL|ERROR|passed|failed" "$OUT/gpu_tests.log" | tail -4
timeout 150 python3 -m benchmarks.gpu.workload_w --skip-sweep \
  --switch-ab prefill_attention,prefill_attention_tma --out "$OUT" > "$OUT/workload_w.log" 2>&1
grep -E "switch A/B|kubellm W|decode_batch256|Error" "$OUT/workload_w.log" | cut -c1-600
timeout 200 bash benchmarks/serving/run_h200.sh "$OUT" .serve-bench/tokenizer .serve-bench/whl \
  -- --workloads 64@inf,512@inf --max-model-len 2048 --max-num-seqs 256 --api-server-count 4 \
  --trace-dir "$OUT/serve_trace" > "$OUT/serve_run.log" 2>&1; tail -16 "$OUT/serve_run.log"
python3 -m benchmarks.serving.arrival_trace "$OUT/serve_trace" > "$OUT/serve_trace/arrivals.txt" 2>&1
grep -E "^burst|recv|first |steps" "$OUT/serve_trace/arrivals.txt" | head -8
timeout 80 python3 -m benchmarks.gpu.w4a16 --part kernel --variants dot,dot-magic --out "$OUT" \
  > "$OUT/w4a16_kernel.log" 2>&1
python3 - "$OUT/w4a16_kernel.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["gemm"]:
    v = {k: (x["us"], x["of_copy_bandwidth"]) for k, x in r["variants"].items()}
    print(r["k"], r["n"], r["m"], "bf16", r["bf16_linear_us"], v)
PY
for kind in final_only cumulative; do
  OMP_NUM_THREADS=1 timeout 30 python3 -m benchmarks.cpu.host_overhead --steps 128 \
    --output-kind $kind --clock cpu 2>&1 | tail -1 | tee -a "$OUT/host_overhead.txt"
done
