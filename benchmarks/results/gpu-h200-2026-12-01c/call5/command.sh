#!/usr/bin/env bash
# call 5: the tinygemm GPU tests at this commit (tinygemm now serves calls of <= 4 rows)
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
timeout -k 5 170 python3 -m pytest -m gpu tests/kernels/test_tinygemm.py \
  "tests/gpu/test_quantized_cuda.py::test_4bit_greedy_tokens_are_transformers_best_on_the_same_weights[graphs-tinygemm]" \
  -q -p no:cacheprovider --tb=short 2>&1 | grep -v "Warn\|warn" | tail -15 | tee "$OUT/tinygemm_tests.log"
