#!/usr/bin/env bash
# Fill .serve-bench/ (git-ignored) on the development machine with what the GPU machine
# lacks for STAGES="serve multi api" of benchmarks/gpu/run_all.sh: the SmolLM2 tokenizer
# files and Python 3.12 wheels of the server's dependencies (the GPU machine has no
# network). Pass it to the device tool as carry: [".serve-bench"].
#   bash benchmarks/serving/prepare_serve_bench.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${1:-.venv/bin/python}
dest=.serve-bench
mkdir -p "$dest/whl" "$dest/tokenizer"
"$python" - "$dest/tokenizer" <<'PY'
import shutil, sys
from pathlib import Path
from kubellm.runtime.loading.default_model import default_model_path
src = Path(default_model_path())
for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
    if (src / name).exists():
        shutil.copy(src / name, sys.argv[1])
PY
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d "$dest/whl" fastapi starlette uvicorn pydantic pydantic-core annotated-types \
  typing-inspection typing-extensions annotated-doc opentelemetry-api anyio click h11 \
  httpx httpcore sniffio certifi idna pyyaml pyzmq msgspec orjson uvloop httptools \
  prometheus-client aiohttp aiohappyeyeballs aiosignal attrs frozenlist multidict \
  propcache yarl
# structured outputs (STAGES=api): xgrammar (and llguidance, which its benchmark compares
# it with); their wheels are manylinux_2_27 / 2_28 / 2_31
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 -d "$dest/whl" "xgrammar>=0.2.9" apache-tvm-ffi llguidance
ls "$dest/tokenizer" "$dest/whl"
