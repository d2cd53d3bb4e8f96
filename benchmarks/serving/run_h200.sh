#!/usr/bin/env bash
# The serving benchmark on a GPU machine, in one command: a random Llama-3-8B-shaped
# checkpoint, `kubellm serve` launched on it and driven over HTTP with Poisson arrivals,
# then the same schedule through the engine in process (no HTTP), for the HTTP overhead.
#   benchmarks/serving/run_h200.sh OUT_DIR TOKENIZER_DIR [WHEELS_DIR] [-- extra bench flags]
# (tests/benchmarks/test_serve_stage.py runs it on CPU with a tiny MODEL_DIR and
# --device cpu: the same script, shrunk, so it cannot fail on the GPU for a Python error)
# WHEELS_DIR: wheels of what the GPU image lacks (fastapi, starlette, uvicorn, pydantic...).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: run_h200.sh OUT_DIR TOKENIZER_DIR [WHEELS_DIR] [-- bench flags]}
tokenizer=${2:?tokenizer directory (tokenizer.json)}
wheels=${3:-}
shift $(( $# < 3 ? $# : 3 )); [ "${1:-}" = "--" ] && shift
python=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$out"
if [ -n "$wheels" ] && [ "$wheels" != "-" ]; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$wheels"/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# the project itself, from its source roots (nothing is installed, nothing can be fetched)
export PYTHONPATH=$PWD/runtime:$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
"$python" -c "import torch; print('torch', torch.__version__,
  torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU (CPU smoke run)')"
model=${MODEL_DIR:-/tmp/llama3-8b-random}
# MODEL_DIR holding any checkpoint (a tiny one: the CPU smoke test) is used as it is
[ -f "$model/config.json" ] ||
  "$python" -m benchmarks.serving.make_random_llama "$model" --tokenizer "$tokenizer" \
    ${NUM_LAYERS:+--num-layers $NUM_LAYERS}
# prompts ~512 tokens, outputs 128 (BENCHMARKS.md, serving); ids within the tokenizer's vocab
"$python" -m kubellm.runtime bench serve --launch --compare-in-process --model "$model" \
  --input-len 512 --output-len 128 --prompt-vocab 49152 --out "$out" "$@" \
  2>&1 | tee "$out/serve_bench.log"
"$python" -m benchmarks.serving.plot_serve "$out/serve_bench.json" || true  # matplotlib may be absent there
