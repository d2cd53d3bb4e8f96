"""Our engine against transformers on one random checkpoint of a mixture-of-experts shape
(fewer layers than the real model): greedy tokens compared by the top-N rule of
``agreement.py``. Used by the GPU benchmark (benchmarks/gpu/moe.py, bf16 on the H200,
or fp32 on the CPU with --smoke) and by tests/gpu/test_moe_cuda.py."""
from __future__ import annotations

import gc
import random
from pathlib import Path

import torch

from benchmarks.common.agreement import first_disagreement, teacher_forced_gaps
from benchmarks.common.shapes import write_config


def random_checkpoint(shape: dict, out: Path, layers: int, device: str,
                      dtype: torch.dtype, init_std: float = 0.05):
    """transformers' own init of ``shape`` with ``layers`` layers, saved as safetensors
    (per-expert tensors, as on the hub); returns (path, the transformers model)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg_dir = write_config(shape, out / "cfg", num_hidden_layers=layers,
                           initializer_range=init_std)
    config = AutoConfig.from_pretrained(cfg_dir)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(out / "ckpt")
    return str(out / "ckpt"), model.eval()


def check_agreement(path: str, hf_model, device: str, num_prompts: int = 12,
                    max_tokens: int = 16, top_n: int = 5, vocab_high: int = 100000,
                    **engine) -> dict:
    """Greedy continuations of random prompts from both; ``failures`` lists the prompts
    that break the top-N rule (empty: agreement); ``gaps_std`` holds, per prompt, the
    largest teacher-forced gap of our tokens (agreement.teacher_forced_gaps)."""
    from kubellm.runtime import LLM, SamplingParams
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, vocab_high) for _ in range(rng.randint(5, 300))]
               for _ in range(num_prompts)]
    with LLM(path, skip_tokenizer_init=True, device=device, **engine) as llm:
        outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens,
                                                    ignore_eos=True, logprobs=top_n))
        executor = llm.engine.executor
        engine_facts = {"backend": getattr(executor, "backend_name", None),
                        "cuda_graphs": getattr(executor, "graphs", None) is not None}
    # shut down (weights, KV cache, graphs freed): the next engine's memory profile and
    # transformers' generate below have the GPU to themselves
    del executor
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    failures, identical, gaps = [], 0, []
    for i, (p, o) in enumerate(zip(prompts, outs)):
        gen = hf_model.generate(torch.tensor([p], device=device), do_sample=False,
                                max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                                output_scores=True, return_dict_in_generate=True,
                                pad_token_id=0)
        ref = gen.sequences[0, len(p):].tolist()
        ref_top = [set(torch.topk(s[0].float(), top_n).indices.tolist()) for s in gen.scores]
        ours = o.outputs[0].token_ids
        identical += ours == ref
        msg = first_disagreement(ours, o.outputs[0].logprobs, ref, ref_top,
                                 names=("ours", "transformers"))
        if msg:
            failures.append(f"prompt {i}: {msg}")
        gaps.append(round(float(teacher_forced_gaps(hf_model, p, ours, device).max()), 3))
    return {"num_prompts": num_prompts, "max_tokens": max_tokens, "top_n": top_n,
            "identical": identical, "failures": failures, "gaps_std": gaps, **engine_facts}
