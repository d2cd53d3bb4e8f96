#!/usr/bin/env bash
# The GPU kernel tests (pytest -m gpu tests/kernels) and the paged-attention benchmark in
# one command, on a machine with CUDA. Logs and JSON go to OUT_DIR.
#   benchmarks/kernels/run_on_gpu.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: benchmarks/kernels/run_on_gpu.sh OUT_DIR}
python=${PYTHON:-python3}
mkdir -p "$out"
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
# Nothing is installed there: the source roots go on the path (folder = import path).
export PYTHONPATH=$PWD/runtime:$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
"$python" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
"$python" -m pytest tests/kernels -m gpu -q -p no:cacheprovider 2>&1 | tee "$out/gpu_kernel_tests.log"
tests_rc=${PIPESTATUS[0]}
"$python" -m benchmarks.kernels.bench_paged_attention --out "$out" 2>&1 | tee "$out/bench_paged_attention.log"
bench_rc=${PIPESTATUS[0]}
exit $(( tests_rc || bench_rc ))
