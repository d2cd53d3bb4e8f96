#!/usr/bin/env bash
# Session s19, ~380 s: a split-K Triton GEMM (kernels/dense_gemm.py) against cuBLAS on the
# decode projections of Llama-3-8B at 128-384 rows. (1) its GPU test (every config at
# real shapes against an fp32 reference); (2) every config, cuBLAS and cuBLASLt timed
# against each GEMM's roofline (benchmarks/kernels/bench_dense_gemm.py); (3) the engine's
# agreement tests with the near-tie rule (tests/gpu/test_engine_cuda.py -k long_split);
# (4) split-KV's few-sequence batches (batch 1-16) at min_kv_chunk 0/128/256/512.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call65; mkdir -p "$work"
pack() { tar czf "$OUT/call65.tgz" -C /tmp call65; }
cp "$0" "$work/command.sh"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_dense_gemm.py \
  > "$work/gpu_tests.log" 2>&1
echo "dense GEMM GPU tests exit $?"; tail -3 "$work/gpu_tests.log"; pack
timeout 240 python3 -m benchmarks.kernels.bench_dense_gemm --out "$work" \
  > "$work/dense_gemm.log" 2>&1
echo "dense GEMM bench exit $?"; grep -v "^{" "$work/dense_gemm.log" | tail -20; pack
timeout 90 python3 -m benchmarks.kernels.bench_decode_long_tail --few --out "$work" \
  > "$work/few.log" 2>&1
echo "few exit $?"; grep -v "^    " "$work/few.log" | tail -10; pack
timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  -k long_split > "$work/engine_tests.log" 2>&1
echo "engine GPU tests exit $?"; grep -E "near ties|passed|failed" "$work/engine_tests.log" | cut -c1-600
pack
