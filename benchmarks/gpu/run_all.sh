#!/usr/bin/env bash
# Everything that needs the GPU, in one command (run through the device tool):
#   bash benchmarks/gpu/run_all.sh            # tests + kernel bench + workload W + peer
#   STAGES="serve" bash benchmarks/gpu/run_all.sh   # serving benchmark; needs
#     .serve-bench/{tokenizer,whl} carried: the SmolLM2 tokenizer files and wheels of what
#     the GPU image lacks (benchmarks/serving/prepare_serve_bench.sh makes them)
#   STAGES="multi" bash benchmarks/gpu/run_all.sh   # TP/PP on 2+ GPUs (NCCL); carry the
#     SmolLM2 tokenizer files in .serve-bench/tokenizer (tests read KUBELLM_TEST_TOKENIZER_DIR);
#     then benchmarks/gpu/multi_gpu.py (TP/PP vs TP=1, W scaling, collective times) with
#     MULTI_ARGS (default "--budget-s 420": it starts no configuration past that)
#   STAGES="api" bash benchmarks/gpu/run_all.sh     # structured outputs and logprobs on the
#     GPU (~4 min): carry .serve-bench (its whl/ holds xgrammar, which the image lacks);
#     CUDA tests of the grammar mask and prompt logprobs, then benchmarks/api/mask_bench.py
#     (batch 64, vocab 128256), grammar_engines.py (xgrammar vs llguidance on this host's
#     CPU) and logprob_overhead.py (Llama-3-8B shape)
#   STAGES="mp" bash benchmarks/gpu/run_all.sh      # one GPU: workload W through the
#     multi-process engine at one rank (NCCL) vs the single-process engine in one run, and
#     GPU memory after each engine's shutdown (benchmarks/gpu/mp_engine.py), then the
#     lifecycle GPU test (tests/gpu/test_engine_lifecycle_cuda.py); ~5 min
# Results land in $OUT (JSON, PNG, logs).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TRITON_INTERPRET=0
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
# The GPU image has torch, triton and transformers but no network: no install, the source
# roots go on the path (their folders are their import paths).
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
STAGES=${STAGES:-"tests kernels w"}
for stage in $STAGES; do
  case $stage in
    tests)   python3 -m pytest -m gpu tests/kernels tests/gpu -q -p no:cacheprovider -x \
               2>&1 | tee "$OUT/gpu_tests.log" | tail -25 ;;
    kernels) python3 -m benchmarks.kernels.bench_paged_attention --out "$OUT" 2>&1 \
               | tee "$OUT/kernels.log" | tail -20 ;;
    w)       python3 -m benchmarks.gpu.workload_w --out "$OUT" --compare-hf 2>&1 \
               | tee "$OUT/workload_w.log" | grep -v Warning | tail -20 ;;
    # issue 14's loads (HTTP vs the engine in process, ratios and targets printed), the
    # server with 4 API server processes; stack-sample profiles of every process in
    # $OUT/serve_profiles (engine_core, api_server_N, in_process .profile.txt)
    serve)   bash benchmarks/serving/run_h200.sh "$OUT" .serve-bench/tokenizer .serve-bench/whl \
               -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 \
               --max-num-seqs 256 --api-server-count 4 --profile-dir "$OUT/serve_profiles" \
               2>&1 | tail -40 ;;
    mp)      python3 -m benchmarks.gpu.mp_engine --out "$OUT" 2>&1 \
               | tee "$OUT/mp_engine.log" | grep -v Warning | tail -20
             python3 -m pytest -m gpu tests/gpu/test_engine_lifecycle_cuda.py -q \
               -p no:cacheprovider 2>&1 | tee "$OUT/mp_lifecycle_tests.log" | tail -5 ;;
    multi)   KUBELLM_TEST_TOKENIZER_DIR=$PWD/.serve-bench/tokenizer NCCL_NVLS_ENABLE=0 python3 -m pytest -m gpu tests/runtime/distributed -q \
               -p no:cacheprovider 2>&1 | tee "$OUT/multi_gpu_tests.log" | tail -20
             # shellcheck disable=SC2086  # MULTI_ARGS is a list of flags
             python3 -m benchmarks.gpu.multi_gpu --out "$OUT" ${MULTI_ARGS:---budget-s 420} 2>&1 \
               | tee "$OUT/multi_gpu.log" | grep -v Warning | tail -30 ;;
    api)     python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-api \
               .serve-bench/whl/*.whl 2>&1 | tail -3
             export PYTHONPATH=$PYTHONPATH:/tmp/site-api   # after the image's own packages
             KUBELLM_TEST_TOKENIZER_DIR=$PWD/.serve-bench/tokenizer python3 -m pytest -m gpu \
               tests/runtime/worker/test_constraints_cuda.py -q -p no:cacheprovider 2>&1 \
               | tee "$OUT/api_gpu_tests.log" | tail -15
             python3 -m benchmarks.api.mask_bench --device cuda --vocab-size 128256 \
               --tokenizer .serve-bench/tokenizer --out "$OUT" 2>&1 | tee "$OUT/mask_bench.log" \
               | tail -12
             python3 -m benchmarks.api.grammar_engines --tokenizer .serve-bench/tokenizer \
               --out "$OUT" 2>&1 | tee "$OUT/grammar_engines.log" | tail -16
             python3 -m benchmarks.api.logprob_overhead --device cuda --out "$OUT" 2>&1 \
               | tee "$OUT/logprob_overhead.log" | grep -v Warning | tail -20 ;;
  esac
done
