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
pytest_args=("$PWD/tests/kernels" -m gpu -q -p no:cacheprovider)
if ! (cd / && "$python" -c "import kubellm.kernels" 2>/dev/null); then
  # A bare GPU image without the project installed: map kubellm.kernels onto kernels/ in
  # a shim package, and keep the repo root off sys.path (its kubellm/ has no kernels/):
  # run pytest from elsewhere in importlib mode.
  shim=$(mktemp -d)
  mkdir "$shim/kubellm"
  cp kubellm/__init__.py "$shim/kubellm/"
  ln -s "$PWD/kernels" "$shim/kubellm/kernels"
  export PYTHONPATH="$shim${PYTHONPATH:+:$PYTHONPATH}"
  pytest_args=("$PWD/tests/kernels" -m gpu -q -p no:cacheprovider --import-mode=importlib
               --rootdir "$PWD" -c "$PWD/pyproject.toml")
fi
"$python" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
(cd / && "$python" -m pytest "${pytest_args[@]}") 2>&1 | tee "$out/gpu_kernel_tests.log"
tests_rc=${PIPESTATUS[0]}
"$python" benchmarks/kernels/bench_paged_attention.py --out "$out" 2>&1 | tee "$out/bench_paged_attention.log"
bench_rc=${PIPESTATUS[0]}
exit $(( tests_rc || bench_rc ))
