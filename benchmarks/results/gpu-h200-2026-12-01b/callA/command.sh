#!/usr/bin/env bash
# device call A: W4A16 variants (graph-timed), then the GPU tests that failed or had not run
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
timeout -k 5 230 python3 -m benchmarks.gpu.w4a16 --part kernel --out $OUT 2>&1 | grep -v Warn | tee $OUT/w4a16_kernel.log | tail -20 | cut -c1-600
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-api .serve-bench/whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PYTHONPATH:/tmp/site-api KUBELLM_TEST_TOKENIZER_DIR=$PWD/.serve-bench/tokenizer
timeout -k 5 300 python3 -m pytest -m gpu tests/gpu/test_quantized_cuda.py tests/gpu/test_moe_cuda.py tests/runtime/distributed/test_gpu_parallel.py tests/runtime/parallel/test_comm_timing.py tests/runtime/worker/test_constraints_cuda.py tests/runtime/worker/test_sampler.py tests/gpu/test_decode_kernels_cuda.py tests/kernels/test_w4a16_gemm.py tests/gpu/test_engine_cuda.py -v -p no:cacheprovider --durations=12 2>&1 | tee $OUT/gpu_tests_rest.log | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|Error|^[0-9.]+s " | sed 's/ *\[ *[0-9]*%\]//' | tail -60
