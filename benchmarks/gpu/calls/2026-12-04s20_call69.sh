#!/usr/bin/env bash
# Session s20, ~300 s: a 16-bit GEMV (kernels/dense_gemv.py) against cuBLAS on Llama-3-8B's
# decode projections and LM head at 1, 2 and 4 rows. (1) its GPU test (every config at
# real shapes against an fp32 reference); (2) every config and cuBLAS timed as a fraction
# of the copy bandwidth (benchmarks/kernels/bench_dense_gemv.py).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call69; mkdir -p "$work"
pack() { tar czf "$OUT/call69.tgz" -C /tmp call69; }
cp "$0" "$work/command.sh"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_dense_gemv.py \
  > "$work/gpu_tests.log" 2>&1
echo "dense GEMV GPU tests exit $?"; tail -3 "$work/gpu_tests.log"; pack
timeout 330 python3 -m benchmarks.kernels.bench_dense_gemv --out "$work" \
  > "$work/dense_gemv.log" 2>&1
echo "dense GEMV bench exit $?"; grep -v "^{" "$work/dense_gemv.log" | tail -20; pack
