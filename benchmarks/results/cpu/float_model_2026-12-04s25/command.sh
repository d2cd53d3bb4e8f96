#!/usr/bin/env bash
# Session s25: a float model trained here (20.8 min on the 2-core machine, mostly alone),
# then online 4-bit / FP8 / an FP8 KV cache against it.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
python -m benchmarks.cpu.train_float_model --out /tmp/s25/float-llama    # --steps 1500
cp /tmp/s25/float-llama/training.json benchmarks/results/cpu/float_model_2026-12-04s25/
python -m benchmarks.cpu.quantization_quality --float-model /tmp/s25/float-llama \
  --out benchmarks/results/cpu/float_model_2026-12-04s25
