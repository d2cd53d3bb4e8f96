#!/usr/bin/env bash
# call 2: the nibble kernel's GPU tests, the 4-bit engine test with both 4-bit switches,
# then the whole 4-bit benchmark (kernel variants, bf16 and three 4-bit engines)
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
timeout -k 5 150 python3 -m pytest -m gpu tests/kernels/test_w4a16_nibble.py \
  "tests/gpu/test_quantized_cuda.py::test_4bit_greedy_tokens_are_transformers_best_on_the_same_weights[graphs-nibble-tinygemm]" \
  -q -p no:cacheprovider --tb=short 2>&1 | grep -v "Warn\|warn" | tail -25 | tee "$OUT/w4a16_tests.log"
timeout -k 5 390 python3 -m benchmarks.gpu.w4a16 --out "$OUT" 2>&1 | grep -v Warn > "$OUT/w4a16.log"
grep -v "^gemm" "$OUT/w4a16.log" | tail -60
