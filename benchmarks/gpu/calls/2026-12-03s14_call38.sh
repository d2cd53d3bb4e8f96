#!/usr/bin/env bash
# Session s14, ~330 s: (1) a decode step's weight GEMMs chained as the engine runs them
# (benchmarks/gpu/decode_chain.py): bf16 cuBLAS against the 4-bit GEMV launched plainly
# and as programmatic dependents (PDL), at 1 and 4 rows; (2) the 4-bit/FP8 engine GPU
# tests and the W4A16 variant test with the GEMV's rows now loaded as one [ROWS, BLOCK_N]
# tile (what PDL needs: the weights read before the wait).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call38; mkdir -p "$work"
pack() { tar czf "$OUT/call38.tgz" -C /tmp call38; }
nvidia-smi --query-gpu=name,driver_version --format=csv > "$work/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)" >> "$work/gpu.txt" 2>&1
timeout 200 python3 -m benchmarks.gpu.decode_chain --out "$work" > "$work/decode_chain.log" 2>&1
echo "decode_chain exit $?"; tail -40 "$work/decode_chain.log"; pack
timeout 200 python3 -m pytest -v -s -p no:cacheprovider -m gpu \
  --durations=20 tests/gpu/test_quantized_cuda.py \
  "tests/kernels/test_w4a16_gemm.py::test_gpu_every_variant_at_a_real_shape" \
  > "$work/gpu_tests_quantized.log" 2>&1
echo "quantized GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" \
  "$work/gpu_tests_quantized.log" | tail -20; pack
