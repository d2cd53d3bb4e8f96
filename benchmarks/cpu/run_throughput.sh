#!/usr/bin/env bash
# CPU regression guard (BENCHMARKS.md): our engine against transformers generate() on the
# same prompts in the same run, on the tiny random Llama the tests use.
#   bash benchmarks/cpu/run_throughput.sh [OUT_DIR]
#   THREADS=1 bash benchmarks/cpu/run_throughput.sh [OUT_DIR]   # both engines on one thread:
#     on a shared, loaded machine two OpenMP threads spin against the other processes
#     (measured 2026-12-01: both engines 6-8x slower than with one); the JSON records the
#     threads, the load average and each engine's CPU seconds
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-benchmarks/results/cpu}
mkdir -p "$out"
model=$(mktemp -d)
python - "$model" <<'PY'
import sys
from pathlib import Path
from kubellm.runtime.loading.default_model import default_model_path
from benchmarks.common.tiny_models import write_tiny_model
write_tiny_model("llama", Path(sys.argv[1]), default_model_path())
PY
cmd=(kubellm bench throughput --model "$model" --num-prompts 64 --input-len 32
     --input-len-max 256 --output-len 64 --compare-hf --hf-batch-size 64,16 --json)
if [ -n "${THREADS:-}" ]; then export OMP_NUM_THREADS=$THREADS; fi
echo "${THREADS:+OMP_NUM_THREADS=$THREADS }${cmd[*]}" > "$out/throughput.cmd"
"${cmd[@]}" 2>/dev/null | tee "$out/throughput.log"
tail -n 1 "$out/throughput.log" > "$out/throughput.json"
