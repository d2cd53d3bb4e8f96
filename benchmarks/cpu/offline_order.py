"""An offline batch's steps in the caller's order and longest ``max_tokens`` first.

Replays a workload of benchmarks/gpu/varlen.py through the real scheduler, KV-cache
manager and engine loop on the CPU (a one-layer model of width 16, so the forward passes
cost little), with the batch limits and KV blocks of its H200 run, and counts the steps:
how many, how many decode steps of few sequences (the run's tail), and what they would
take on the H200 by a step-cost model (a step reads the weights or computes its tokens at
the matmul rate, whichever is longer, then reads its keys and values at the copy rate;
Llama-3-8B's sizes, call 74's ceilings). The model is an estimate; the H200 run measures.

    python -m benchmarks.cpu.offline_order [--seeds 0,1] [--workload chat]
    python -m benchmarks.cpu.offline_order --smoke
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.gpu.varlen import FEW_SEQS, lengths, token_ids

# Llama-3-8B on the H200 (call 74: copy 4.22 TB/s, matmul 671 TFLOP/s): weight bytes,
# FLOPs per token, KV bytes per token (32 layers x 8 KV heads x 128 x K and V x 2 bytes)
WEIGHT_BYTES, FLOPS_PER_TOKEN, KV_BYTES_PER_TOKEN = 16.06e9, 2 * 8.03e9, 131072
COPY_BYTES_S, MATMUL_FLOPS_S = 4.22e12, 671e12


def step_seconds(num_tokens: int, context_tokens: int) -> float:
    return max(WEIGHT_BYTES / COPY_BYTES_S, num_tokens * FLOPS_PER_TOKEN / MATMUL_FLOPS_S) \
        + context_tokens * KV_BYTES_PER_TOKEN / COPY_BYTES_S


def replay(workload: str, seed: int, order: str, smoke: bool) -> dict:
    import transformers
    from kubellm.runtime import LLM, SamplingParams
    from kubellm.runtime.engine.llm import longest_first

    from benchmarks.common.tiny_models import COMMON
    model_dir = Path(tempfile.mkdtemp())
    transformers.LlamaConfig(**{**COMMON, "vocab_size": 1024, "hidden_size": 16,
                                "intermediate_size": 32, "num_hidden_layers": 1,
                                "num_attention_heads": 1, "num_key_value_heads": 1,
                                "max_position_embeddings": 8192}).save_pretrained(model_dir)
    # call 74's engine: the hardware-aware defaults on the H200 and its KV blocks
    llm = LLM(str(model_dir), load_format="dummy", skip_tokenizer_init=True, device="cpu",
              max_num_seqs=1024, max_num_batched_tokens=512 if smoke else 8192,
              num_kv_blocks=55035, max_model_len=4096)
    engine = llm.engine
    prompt_lens, output_lens = lengths(workload, seed, smoke)
    prompts = token_ids(prompt_lens, seed, 1000)
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, detokenize=False)
              for n in output_lens]
    steps = []
    launch = engine.executor.launch

    def counted_launch(out, tables, ahead_of=None):
        steps.append((out.num_batched_tokens, len(out.scheduled),
                      sum(s.start + s.num_new_tokens for s in out.scheduled)))
        return launch(out, tables, ahead_of)
    engine.executor.launch = counted_launch
    queue = longest_first(params, 4096) if order == "longest_first" else range(len(prompts))
    for i in queue:   # what LLM.generate does, in the order asked for
        engine.add_request(str(i), prompts[i], params[i].clone(output_kind="final_only"))
    while engine.has_unfinished_requests():
        engine.step()
    llm.shutdown()
    few = sum(1 for tokens, seqs, _ in steps if tokens == seqs and seqs <= FEW_SEQS)
    return {"workload": workload, "seed": seed, "order": order, "steps": len(steps),
            "decode_few_steps": few, "longest_output": max(output_lens),
            "modeled_h200_s": round(sum(step_seconds(t, c) for t, _, c in steps), 3)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="chat")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--smoke", action="store_true", help="the tiny workload (CI)")
    args = ap.parse_args()
    for seed in map(int, args.seeds.split(",")):
        runs = [replay(args.workload, seed, order, args.smoke)
                for order in ("caller", "longest_first")]
        for run in runs:
            print(json.dumps(run))
        print(json.dumps({"seed": seed, "modeled_speedup": round(
            runs[0]["modeled_h200_s"] / runs[1]["modeled_h200_s"], 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
