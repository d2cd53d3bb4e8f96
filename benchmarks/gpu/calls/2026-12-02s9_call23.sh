#!/usr/bin/env bash
# For the next session (written 2026-12-02 s9, not run: the device budget was spent).
# Issue 16 item 7: the fp8_quant_kernel switch (one Triton kernel for the per-token FP8
# rounding of each linear's input, written without a GPU). Its CUDA tests (codes equal
# torch's at Llama-3-8B widths; the same greedy tokens as without it), then decode and W
# of FP8 weights with and without it against bf16 (call 17: FP8 0.71x bf16 at batch 1).
# If it wins, make it a default for FP8 on CUDA 8.9+. About 330 s.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call23; mkdir -p "$work"
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_fp8_quant.py \
  tests/gpu/test_quantized_cuda.py -k "fp8_quant_kernel or gpu_codes" \
  > "$work/gpu_tests.log" 2>&1; echo "GPU tests exit $?"; tail -3 "$work/gpu_tests.log"
timeout 220 python3 -m benchmarks.gpu.w4a16 --variants dot --engines fp8,fp8-quant-kernel \
  --out "$work" > "$work/w4a16.log" 2>&1; echo "engines exit $?"
grep -A12 '"decode_speedup_vs_bf16"' "$work/w4a16.log" | head -16
tar czf "$OUT/call23.tgz" -C "$work" .
