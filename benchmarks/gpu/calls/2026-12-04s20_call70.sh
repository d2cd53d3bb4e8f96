#!/usr/bin/env bash
# Session s20, ~240 s: GEMVs launched as programmatic dependents (kernels/pdl.py: each
# starts in the tail of the one before and prefetches its weights into the L2). (1) the
# PDL and dense GEMV GPU tests; (2) a decode step's 128 projections chained in one CUDA
# graph at 1 and 2 rows: cuBLAS, the 16-bit GEMV plain and with PDL, the 4-bit default
# and the 4-bit FFMA GEMV with PDL (benchmarks/gpu/decode_chain.py).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call70; mkdir -p "$work"
pack() { tar czf "$OUT/call70.tgz" -C /tmp call70; }
cp "$0" "$work/command.sh"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_pdl.py \
  > "$work/gpu_tests.log" 2>&1
echo "PDL GPU tests exit $?"; tail -3 "$work/gpu_tests.log"; pack
timeout 300 python3 -m benchmarks.gpu.decode_chain --rows 1,2 --out "$work" \
  --variants bf16,4bit,bf16-gemv,bf16-gemv-pdl,4bit-pdl > "$work/decode_chain.log" 2>&1
echo "decode chain exit $?"; grep -v "^decode_chain" "$work/decode_chain.log" | tail -40; pack
