#!/usr/bin/env bash
# Everything that needs the GPU, in one command (run through the device tool):
#   bash benchmarks/gpu/run_all.sh            # tests + kernel bench + workload W + peer
# Results land in $OUT (JSON, PNG, logs).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TRITON_INTERPRET=0
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { echo "install failed"; tail -20 "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
STAGES=${STAGES:-"tests kernels w"}
for stage in $STAGES; do
  case $stage in
    tests)   python3 -m pytest -m gpu tests/kernels tests/gpu -q -p no:cacheprovider -x \
               2>&1 | tee "$OUT/gpu_tests.log" | tail -25 ;;
    kernels) python3 benchmarks/kernels/bench_paged_attention.py --out "$OUT" 2>&1 \
               | tee "$OUT/kernels.log" | tail -20 ;;
    w)       python3 benchmarks/gpu/workload_w.py --out "$OUT" --compare-hf 2>&1 \
               | tee "$OUT/workload_w.log" | grep -v Warning | tail -20 ;;
  esac
done
