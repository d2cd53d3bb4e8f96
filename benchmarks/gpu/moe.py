"""Mixture-of-experts on one GPU, in one run (STAGES=moe of run_all.sh):

1. tune: fused MoE block sizes swept per batch bucket on a Qwen3-30B-A3B layer; the
   winners are written as ``fused_moe_configs.json`` (the table to commit as
   kernels/kubellm/kernels/fused_moe_configs.json) and used by the rest of the run;
2. kernel: the tuned fused kernel against a per-expert loop of torch matmuls;
3. w: workload W (benchmarks/gpu/workload_w.py's prompts) on the Qwen3-30B-A3B shape
   (48 layers, 128 experts, top-8, random bf16 weights: load_format=dummy) against its
   limit, computed as W's is from active parameters: prefill FLOPs of the attention, the
   router and the k chosen experts; decode bytes of the attention, the router, the head
   and every expert the step's batch touches, plus the KV cache;
4. agreement: bf16 greedy tokens against transformers on a random Qwen3-30B-A3B-shaped
   checkpoint with 4 layers (the top-5 rule).

    python -m benchmarks.gpu.moe --out DIR [--budget-s 330] [--parts tune,kernel,w,agreement]
                                 [--tune-s 100]
    python -m benchmarks.gpu.moe --smoke --out DIR   # a tiny shape on the CPU (the
                                 # kernels in triton's interpreter): catches script errors
Writes DIR/moe.json (every figure) and DIR/fused_moe_configs.json; a part that would
start past --budget-s is skipped and says so.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common.shapes import QWEN3_30B_A3B, write_config

PARTS = ("tune", "kernel", "w", "agreement")
BUCKETS = [1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
KERNEL_TOKENS = [1, 16, 64, 256, 1024, 4096]
SMOKE_SHAPE = {**QWEN3_30B_A3B, "vocab_size": 2048, "hidden_size": 64, "head_dim": 16,
               "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 8,
               "num_experts_per_tok": 2}
# seconds each part needs on the H200 (compiles included); not started with less left
NEEDS_S = {"tune": 60, "kernel": 20, "w": 120, "agreement": 45}
TUNE_SHARE_S = 100    # the sweep stops starting buckets after this long


def head_dim(shape: dict) -> int:
    return shape.get("head_dim") or shape["hidden_size"] // shape["num_attention_heads"]


def moe_limit(shape: dict, prompts, output_len: int, ceilings: dict, dtype_bytes: int) -> dict:
    """W's limit for an MoE shape: prefill at the matmul ceiling over active parameters
    (+ attention), decode at the copy ceiling over the weights a step reads — the
    experts touched by all requests decoding together, E * (1 - (1 - k/E)^B) per layer."""
    h, layers, vocab = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]
    experts, top_k = shape["num_experts"], shape["num_experts_per_tok"]
    q_dim = shape["num_attention_heads"] * head_dim(shape)
    kv_dim = shape["num_key_value_heads"] * head_dim(shape)
    attn = h * (q_dim + 2 * kv_dim) + q_dim * h
    expert = 3 * h * shape["moe_intermediate_size"]
    router = experts * h
    lengths = [len(p) for p in prompts]
    prompt_tokens = sum(lengths)
    attn_flops = sum(2 * 2 * layers * q_dim * n * n / 2 for n in lengths)
    prefill_flops = 2 * layers * (attn + router + top_k * expert) * prompt_tokens + attn_flops
    batch = len(prompts)
    touched = experts * (1 - (1 - top_k / experts) ** batch)
    step_bytes = dtype_bytes * (layers * (attn + router + touched * expert) + vocab * h)
    kv_per_token = layers * 2 * kv_dim * dtype_bytes
    kv_tokens = sum(n * output_len + output_len * (output_len - 1) / 2 for n in lengths)
    decode_bytes = step_bytes * output_len + kv_tokens * kv_per_token
    t = prefill_flops / (ceilings["matmul_tflops"] * 1e12) + \
        decode_bytes / (ceilings["copy_tb_s"] * 1e12)
    out_tokens = batch * output_len
    return {"limit_s": round(t, 3), "limit_output_tok_s": round(out_tokens / t),
            "limit_total_tok_s": round((out_tokens + prompt_tokens) / t),
            "prefill_flops": prefill_flops, "decode_bytes": decode_bytes,
            "experts_touched_per_layer_per_step": round(touched, 2),
            "active_params": layers * (attn + router + top_k * expert) + vocab * h,
            "total_params": layers * (attn + router + experts * expert) + 2 * vocab * h}


def run_w(shape: dict, smoke: bool, log=print) -> dict:
    from benchmarks.gpu import workload_w as w
    if smoke:   # workload_w's own smoke sizes
        w.NUM_REQUESTS, w.LOW, w.HIGH, w.OUTPUT_LEN = 8, 8, 40, 6
        w.DEVICE, w.DTYPE = "cpu", torch.float32
    w.SHAPE = shape
    ceilings = w.measure_ceilings()
    prompts = w.workload()
    limit = moe_limit(shape, prompts, w.OUTPUT_LEN, ceilings, torch.finfo(w.DTYPE).bits // 8)
    log(f"W limit: {limit}")
    model_dir = write_config(shape, Path(tempfile.mkdtemp()) / "model")
    llm, startup = w.make_llm(model_dir)
    ours = w.run_ours(llm, prompts)
    ours["startup_s"] = round(startup, 1)
    llm.engine.executor.graphs = None   # free the GPU for what runs next
    del llm
    gc.collect()
    torch.cuda.empty_cache()
    return {"ceilings": ceilings, "limit": limit, "kubellm": ours,
            "fraction_of_limit": round(ours["output_tok_s"] / limit["limit_output_tok_s"], 3)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="start no part past this many seconds")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--tune-s", type=float, default=TUNE_SHARE_S,
                    help="the block-size sweep starts no bucket after this many seconds")
    args = ap.parse_args()
    started = time.monotonic()
    if args.smoke and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")   # before triton is first imported
    from benchmarks.common.moe_agreement import check_agreement, random_checkpoint
    from benchmarks.gpu.moe_kernels import Layer, fused_vs_loop, sweep
    from kubellm.kernels.fused_moe_configs import set_table
    device = "cpu" if args.smoke else "cuda"
    dtype = torch.float32 if args.smoke else torch.bfloat16
    shape = SMOKE_SHAPE if args.smoke else QWEN3_30B_A3B
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                    "torch": torch.__version__, "skipped": {}}

    def save():
        (out / "moe.json").write_text(json.dumps(result, indent=1))

    def may_start(part: str) -> bool:
        if part not in args.parts.split(","):
            return False
        left = args.budget_s - (time.monotonic() - started)
        if not args.smoke and left < NEEDS_S[part]:
            result["skipped"][part] = f"--budget-s: {left:.0f} s left, needs ~{NEEDS_S[part]} s"
            return False
        return True

    layer = Layer(shape["num_experts"], shape["num_experts_per_tok"], shape["hidden_size"],
                  shape["moe_intermediate_size"], dtype, device)
    if may_start("tune"):
        buckets = [1, 16] if args.smoke else BUCKETS
        deadline = None if args.smoke else time.monotonic() + args.tune_s
        table = {result["device"]: {layer.key(): sweep(layer, buckets, args.smoke, deadline)}}
        (out / "fused_moe_configs.json").write_text(json.dumps(table, indent=1))
        result["tune"] = table
        if device == "cuda":
            set_table(table)              # the rest of the run uses what was just measured
        save()
    if may_start("kernel"):
        result["fused_vs_loop"] = fused_vs_loop(layer, [1, 16] if args.smoke else KERNEL_TOKENS)
        save()
    del layer
    if may_start("w"):
        result["w"] = run_w(shape, args.smoke)
        print("W:", json.dumps({k: result["w"][k] for k in ("kubellm", "fraction_of_limit")}),
              flush=True)
        save()
    if may_start("agreement"):
        work = Path(tempfile.mkdtemp())
        path, hf = random_checkpoint(shape, work, layers=2 if args.smoke else 4,
                                     device=device, dtype=dtype)
        engine = {"dtype": str(dtype).removeprefix("torch."), "max_model_len": 512,
                  "max_num_seqs": 16}
        if device == "cuda":
            engine["gpu_memory_utilization"] = 0.5
        result["agreement"] = check_agreement(
            path, hf, device, num_prompts=3 if args.smoke else 12,
            max_tokens=4 if args.smoke else 16, vocab_high=shape["vocab_size"] - 16, **engine)
        print("agreement:", result["agreement"], flush=True)
        del hf
        torch.cuda.empty_cache()
        save()
    save()
    print(json.dumps({k: v for k, v in result.items() if k != "tune"}, indent=1)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
