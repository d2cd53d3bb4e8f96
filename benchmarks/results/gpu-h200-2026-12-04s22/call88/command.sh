#!/usr/bin/env bash
# Session s22, ~150 s (carry .serve-bench: bash benchmarks/serving/prepare_serve_bench.sh):
# the GPU-marked tests under tests/runtime, by file (the server tests' modules import
# openai, jsonschema, schemathesis and websockets, which travel nowhere: their first run
# failed to collect), with the server's wheels and xgrammar installed beside the machine's
# packages and the SmolLM2 tokenizer files: call 86 ran them without xgrammar (its
# grammar-mask tests skipped).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call88; mkdir -p "$work"
pack() { tar czf "$OUT/call88.tgz" -C /tmp call88; }
cp "$0" "$work/command.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site-api .serve-bench/whl/*.whl > "$work/pip.log" 2>&1; echo "wheels exit $?"
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD:/tmp/site-api
export KUBELLM_TEST_TOKENIZER_DIR=$PWD/.serve-bench/tokenizer
timeout 400 python3 -m pytest -v -rfEs -p no:cacheprovider -m gpu \
  tests/runtime/worker/test_constraints_cuda.py tests/runtime/worker/test_sampler.py \
  tests/runtime/parallel/test_comm_timing.py tests/runtime/distributed/test_gpu_parallel.py \
  > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; grep -E "FAILED|ERROR|SKIPPED|passed|failed" "$work/gpu_tests.log" \
  | tail -12 | cut -c1-300; pack
