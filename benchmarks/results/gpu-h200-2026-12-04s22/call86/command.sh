#!/usr/bin/env bash
# Session s22, ~570 s: every GPU-marked test of tests/kernels and tests/runtime on this tree
# (the runtime's by file: the other runtime test files import the server's packages, which
# this machine lacks), and call 87's one failure (tests/gpu/test_decode_kernels_cuda.py)
# after its fix.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call86; mkdir -p "$work"
pack() { tar czf "$OUT/call86.tgz" -C /tmp call86; }
cp "$0" "$work/command.sh"
timeout 560 python3 -m pytest -v -rfEs --durations=15 -p no:cacheprovider -m gpu tests/kernels \
  tests/runtime/worker/test_sampler.py tests/runtime/worker/test_constraints_cuda.py \
  tests/runtime/parallel/test_comm_timing.py tests/runtime/distributed/test_gpu_parallel.py \
  tests/gpu/test_decode_kernels_cuda.py \
  > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|SKIPPED" "$work/gpu_tests.log" | grep -c PASSED
grep -E "FAILED|ERROR|passed|failed" "$work/gpu_tests.log" | tail -15 | cut -c1-300; pack
