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
#   STAGES="moe" bash benchmarks/gpu/run_all.sh     # mixture of experts (~6 min): the fused
#     MoE kernel tests at real shapes, then benchmarks/gpu/moe.py (block sizes tuned per
#     batch bucket -> $OUT/fused_moe_configs.json, fused kernel vs per-expert loop, bf16
#     agreement with transformers, workload W on the Qwen3-30B-A3B shape) with MOE_ARGS
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
    serve)   bash benchmarks/serving/run_h200.sh "$OUT" .serve-bench/tokenizer .serve-bench/whl \
               -- --request-rates 4,16,inf --num-prompts 64 --max-model-len 2048 \
               --max-num-seqs 128 2>&1 | tail -20 ;;
    moe)     python3 -m pytest -m gpu tests/kernels/test_fused_moe.py -q -p no:cacheprovider \
               2>&1 | tee "$OUT/moe_kernel_tests.log" | tail -5
             # shellcheck disable=SC2086  # MOE_ARGS is a list of flags
             python3 -m benchmarks.gpu.moe --out "$OUT" ${MOE_ARGS:---budget-s 330} 2>&1 \
               | tee "$OUT/moe.log" | grep -v Warning | tail -40 ;;
    multi)   KUBELLM_TEST_TOKENIZER_DIR=$PWD/.serve-bench/tokenizer NCCL_NVLS_ENABLE=0 python3 -m pytest -m gpu tests/runtime/distributed -q \
               -p no:cacheprovider 2>&1 | tee "$OUT/multi_gpu_tests.log" | tail -20
             # shellcheck disable=SC2086  # MULTI_ARGS is a list of flags
             python3 -m benchmarks.gpu.multi_gpu --out "$OUT" ${MULTI_ARGS:---budget-s 420} 2>&1 \
               | tee "$OUT/multi_gpu.log" | grep -v Warning | tail -30 ;;
  esac
done
