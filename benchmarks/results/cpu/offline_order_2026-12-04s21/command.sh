# 2026-12-04 (session s21), this repository's 2-core machine: issue 20's chat workload
# (benchmarks/gpu/varlen.py's lengths, seeds 0 and 1) through the real scheduler on the
# CPU with call 74's batch limits and KV blocks, queued in the prompts' order and longest
# max_tokens first (LLM.generate's order since this session); chat.jsonl
OMP_NUM_THREADS=1 python -m benchmarks.cpu.offline_order --seeds 0,1 > chat.jsonl
# the caller's order matches call 74's H200 run step for step (1,072 / 1,073 steps, 181 /
# 278 decode steps of at most 32 sequences); longest first: 1,024 steps, the longest
# output. The step-cost model puts the gain at 0.5% on the H200 (modeled_speedup).
# On the H200 (benchmarks/results/gpu-h200-2026-12-04s21, calls 77 and 81) the order won
# 0.5% / 1.1% on this workload at Llama-3-8B's shape and lost 16% at Qwen2.5-0.5B's (its
# mixed steps took 1.33 s against 0.79: the long outputs admitted first kept decoding
# beside every prefill chunk). Reverted with benchmarks/cpu/offline_order.py; the code is
# in commit 98fd76d.
