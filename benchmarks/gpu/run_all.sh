#!/usr/bin/env bash
# Everything that needs the GPU, in one command (run through the device tool):
#   bash benchmarks/gpu/run_all.sh            # tests + kernel bench + workload W + peer
#   STAGES="serve" bash benchmarks/gpu/run_all.sh   # serving benchmark; needs
#     .serve-bench/{tokenizer,whl} carried: the SmolLM2 tokenizer files and wheels of what
#     the GPU image lacks (benchmarks/serving/prepare_serve_bench.sh makes them)
#   STAGES="coldstart" bash benchmarks/gpu/run_all.sh   # one replica's cold start: an 8B
#     bf16 checkpoint written to local disk, engine-ready seconds from the page cache and
#     after dropping it, against the operator's startup budget (cold_start.json, ~5 min)
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
#   STAGES="decode-ablation prefill-attn varlen w" W_ARGS=--skip-sweep bash benchmarks/gpu/run_all.sh
#     issue 20's figures (~7 minutes): the decode step with each kernel switch alone
#     (benchmarks/gpu/decode_ablation.py), prefill attention against SDPA flash
#     (benchmarks/kernels/bench_prefill_attention.py), the variable-length workload
#     (benchmarks/gpu/varlen.py, VARLEN_ARGS), then W (W_ARGS, default --compare-hf);
#     small-model: the same chat workload on Qwen2.5-0.5B (host-bound steps).
#     The first two write the switches that won to $OUT/kernel_switches_*.txt; varlen
#     and w then run with them (KUBELLM_KERNEL_SWITCHES), unless it is set already.
#   STAGES="moe" bash benchmarks/gpu/run_all.sh     # mixture of experts (~6 min): the fused
#     MoE kernel tests at real shapes, then benchmarks/gpu/moe.py (block sizes tuned per
#     batch bucket -> $OUT/fused_moe_configs.json, fused kernel vs per-expert loop, bf16
#     agreement with transformers, workload W on the Qwen3-30B-A3B shape) with MOE_ARGS
#   STAGES="w4a16" bash benchmarks/gpu/run_all.sh  # 4-bit vs bf16 (benchmarks/gpu/w4a16.py):
#     W4A16 kernel tests, decode tok/s at batch 1..256, workload W, weight GiB, KV blocks,
#     the GEMM's batch-1 read bandwidth against the copy bandwidth -> $OUT/w4a16.json (summary
#     and all figures; the parts in w4a16_{kernel,engine_bf16,engine_4bit}.json); ~5 min
# STAGE_SECONDS="STAGE=SECONDS ..." bounds stages (below). Results land in $OUT (JSON, PNG, logs).
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
switches_given=${KUBELLM_KERNEL_SWITCHES+set}
use_winning_switches() {  # the kernel switches this run's ablation stages found faster
  [ -n "$switches_given" ] && return
  local won="" file
  for file in decode:decode-ablation prefill:prefill-attn; do   # this run's stages only
    case " $STAGES " in *" ${file#*:} "*) won+=$(cat "$OUT/kernel_switches_${file%%:*}.txt" 2>/dev/null),;; esac
  done
  won=$(echo "$won" | tr '\n' ',' | sed 's/,,*/,/g; s/^,//; s/,$//')
  export KUBELLM_KERNEL_SWITCHES=$won
  echo "kernel switches for the engine stages: ${won:-none (the defaults)}"
}
run_stage() {
  case $1 in
    idle)    sleep "${IDLE_SECONDS:-600}" & wait ;;   # a child that outlives a limit (tests)
    # every GPU-marked test of the tree (the files listed by grep, so no other test's
    # imports are needed); with .serve-bench carried, its wheels and tokenizer serve the
    # API tests, else those skip and say why. -v: a stage stopped by its limit still
    # names the last test it finished.
    tests)   if [ -d .serve-bench/whl ]; then
               python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-api \
                 .serve-bench/whl/*.whl 2>&1 | tail -3
               export PYTHONPATH=$PYTHONPATH:/tmp/site-api KUBELLM_TEST_TOKENIZER_DIR=$PWD/.serve-bench/tokenizer
             fi
             # shellcheck disable=SC2046  # one argument per file
             python3 -m pytest -m gpu $(grep -rl --include='test_*.py' 'pytest.mark.gpu' tests | sort) \
               -v -p no:cacheprovider --durations=15 2>&1 | tee "$OUT/gpu_tests.log" | tail -40 ;;
    kernels) python3 -m benchmarks.kernels.bench_paged_attention --out "$OUT" 2>&1 \
               | tee "$OUT/kernels.log" | tail -20 ;;
    w)       use_winning_switches
             # shellcheck disable=SC2086  # W_ARGS is a list of flags
             python3 -m benchmarks.gpu.workload_w --out "$OUT" ${W_ARGS:---compare-hf} 2>&1 \
               | tee "$OUT/workload_w.log" | grep -v Warning | tail -20 ;;
    decode-ablation)
             python3 -m benchmarks.gpu.decode_ablation --out "$OUT" 2>&1 \
               | tee "$OUT/decode_ablation.log" | grep -v Warning | tail -12 ;;
    prefill-attn)
             python3 -m benchmarks.kernels.bench_prefill_attention --out "$OUT" 2>&1 \
               | tee "$OUT/prefill_attention.log" | tail -12 ;;
    small-model)   # the chat workload on Qwen2.5-0.5B: host work per step against a small step
             use_winning_switches
             python3 -m benchmarks.gpu.varlen --out "$OUT" --shape qwen2.5-0.5b --seeds 0 \
               --skip-old-defaults 2>&1 | tee "$OUT/varlen_small.log" | grep -v Warning | tail -4 ;;
    varlen)  use_winning_switches
             # shellcheck disable=SC2086  # VARLEN_ARGS is a list of flags
             python3 -m benchmarks.gpu.varlen --out "$OUT" ${VARLEN_ARGS:-} 2>&1 \
               | tee "$OUT/varlen.log" | grep -v Warning | tail -8 ;;
    coldstart) python3 -m benchmarks.gpu.cold_start --out "$OUT" --workdir /tmp/coldstart-model \
               2>&1 | tee "$OUT/cold_start.log" | grep -v Warning | tail -20 ;;
    w4a16)   python3 -m pytest -m gpu tests/kernels/test_w4a16_gemm.py tests/kernels/test_tinygemm.py tests/gpu/test_quantized_cuda.py -q -p no:cacheprovider \
               2>&1 | tee "$OUT/w4a16_tests.log" | tail -5
             python3 -m benchmarks.gpu.w4a16 --out "$OUT" 2>&1 | tee "$OUT/w4a16.log" \
               | grep -v Warning | tail -30 ;;
    # issue 14's loads (HTTP vs the engine in process, ratios and targets printed), the
    # server with 4 API server processes; stack-sample profiles of every process in
    # $OUT/serve_profiles (engine_core, api_server_N, in_process .profile.txt); arrival
    # traces (client, API servers, core) in $OUT/serve_trace, summed up per burst in
    # $OUT/serve_trace/arrivals.txt (what the core's first steps held)
    serve)   bash benchmarks/serving/run_h200.sh "$OUT" .serve-bench/tokenizer .serve-bench/whl \
               -- --workloads 64@16,64@inf,512@64,512@inf --max-model-len 2048 \
               --max-num-seqs 256 --api-server-count 4 --profile-dir "$OUT/serve_profiles" \
               --trace-dir "$OUT/serve_trace" 2>&1 | tail -40
             PYTHONPATH=$PWD/runtime:$PWD/kernels${PYTHONPATH:+:$PYTHONPATH} python3 \
               -m benchmarks.serving.arrival_trace "$OUT/serve_trace" \
               | tee "$OUT/serve_trace/arrivals.txt" | grep -E "^burst|recv|first |steps" ;;
    mp)      python3 -m benchmarks.gpu.mp_engine --out "$OUT" 2>&1 \
               | tee "$OUT/mp_engine.log" | grep -v Warning | tail -20
             python3 -m pytest -m gpu tests/gpu/test_engine_lifecycle_cuda.py -q \
               -p no:cacheprovider 2>&1 | tee "$OUT/mp_lifecycle_tests.log" | tail -5 ;;
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
}
# STAGE_SECONDS="w4a16=230 moe=180": a stage still running after its seconds is stopped
# (its whole process group: the GPU is free for the next stage, what it wrote stays), so a
# device call with a hard limit still reaches its last stage.
stage_seconds() {
  local entry
  for entry in ${STAGE_SECONDS:-}; do
    [ "${entry%%=*}" = "$1" ] && echo "${entry#*=}" && return
  done
}
set -m   # each background stage gets its own process group
for stage in $STAGES; do
  limit=$(stage_seconds "$stage")
  if [ -z "$limit" ]; then
    run_stage "$stage"
    continue
  fi
  run_stage "$stage" &
  pid=$!
  ( sleep "$limit"; echo "stage $stage: stopped after $limit s" | tee -a "$OUT/stopped_stages.txt"
    kill -TERM -- "-$pid" 2>/dev/null; sleep 10; kill -KILL -- "-$pid" 2>/dev/null ) &
  watchdog=$!
  wait "$pid"
  kill -- "-$watchdog" 2>/dev/null
done
