#!/usr/bin/env bash
# Session s22, ~570 s: every GPU-marked test of tests/gpu on this tree: the engine's GPU tests (tests/gpu), with paged_decodes_apart now on by default.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call87; mkdir -p "$work"
pack() { tar czf "$OUT/call87.tgz" -C /tmp call87; }
cp "$0" "$work/command.sh"
timeout 560 python3 -m pytest -v -rfEs --durations=15 -p no:cacheprovider -m gpu tests/gpu \
  > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|SKIPPED" "$work/gpu_tests.log" | grep -c PASSED
grep -E "FAILED|ERROR|passed|failed" "$work/gpu_tests.log" | tail -15 | cut -c1-300; pack
