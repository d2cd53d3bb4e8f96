#!/usr/bin/env bash
# 2026-12-02 s6-w4 (issue 16): the W4A16 decode GEMM as one kernel (split-K sums meet in
# a persistent workspace; the last program writes the output and zeros it) against the
# old path, variant dot-zeros (fp32 zeros, atomic adds, a cast: three kernels per call).
# GPU tests of the new path first (the kernel in CUDA graphs, dot-zeros at a real shape,
# the 4-bit engine in graphs against transformers), then the w4a16 benchmark: the GEMM,
# dot against dot-zeros, at 1/4/16/64 rows on the Llama-3-8B projections, then the bf16
# and 4-bit engines (decode batch 1-256, workload W). At most 130 + 330 s.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
# kernel tests first: the engine test is the slowest, and a limit stops only it
timeout 130 python3 -m pytest -m gpu tests/kernels/test_w4a16_gemm.py tests/gpu/test_quantized_cuda.py \
  -k "(every_variant and dot-zeros) or in_cuda_graphs or (greedy and graphs and not head and not tinygemm)" \
  -v -p no:cacheprovider > "$OUT/w4a16_tests.log" 2>&1
grep -E "PASS|FAIL|ERROR|passed|failed" "$OUT/w4a16_tests.log" | tail -8
timeout 330 python3 -m benchmarks.gpu.w4a16 --engines 4bit --variants dot,dot-zeros --out "$OUT" \
  > "$OUT/w4a16.log" 2>&1; echo "w4a16 benchmark exit $?"
# the GEMM (written before the engines run): us per call, new against old
python3 - "$OUT/w4a16_kernel.json" <<'PY'
import json, sys
print("k n m | bf16 | dot (workspace) | dot-zeros (zeros+cast) | zeros/dot")
for r in json.load(open(sys.argv[1]))["gemm"]:
    new, old = r["variants"]["dot"]["us"], r["variants"]["dot-zeros"]["us"]
    print(r["k"], r["n"], r["m"], "|", r["bf16_linear_us"], "|", new, "|", old, "|",
          round(old / new, 3))
PY
grep -E "^(bf16|4bit) (decode|W) |Error|error" "$OUT/w4a16.log" | cut -c1-300
python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['summary']))" \
  "$OUT/w4a16.json"
