"""How far bf16 alone moves a mixture-of-experts model's greedy tokens, on the CPU (no
Triton kernel involved): a Mixtral-8x7B-shaped checkpoint with 2 layers, our engine in bf16
against transformers in bf16 on the same weights, teacher-forced gaps
(benchmarks/common/agreement.py) per prompt, and for the worst position the margin between
the router's 2nd and 3rd expert logits, whose bf16 step near the top logits is 1/32.

This is the noise floor tests/gpu/test_moe_cuda.py's bounds come from. About 80 s and
12 GiB of memory on the 2-core machine:

    python -m benchmarks.cpu.moe_bf16_gaps [--out DIR]
    python -m benchmarks.cpu.moe_bf16_gaps --smoke --out DIR   # a tiny shape (CI)
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

import torch

from benchmarks.common.agreement import teacher_forced_gaps
from benchmarks.common.moe_agreement import random_checkpoint
from benchmarks.common.shapes import MIXTRAL_8X7B

SMOKE = {**MIXTRAL_8X7B, "vocab_size": 2048, "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4, "num_key_value_heads": 2}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="a tiny Mixtral shape")
    args = ap.parse_args()
    shape = SMOKE if args.smoke else MIXTRAL_8X7B
    vocab = shape["vocab_size"]
    from kubellm.runtime import LLM, SamplingParams
    rng = random.Random(0)   # the GPU test's prompts
    prompts = [[rng.randrange(1000, vocab - 16) for _ in range(rng.randint(5, 300))]
               for _ in range(12)]
    with tempfile.TemporaryDirectory() as tmp:   # 5.9 GB of checkpoint
        path, hf = random_checkpoint(shape, Path(tmp), 2, "cpu", torch.bfloat16)
        with LLM(path, skip_tokenizer_init=True, device="cpu", dtype="bfloat16",
                 max_model_len=2048, max_num_seqs=16, num_kv_blocks=512) as llm:
            outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16,
                                                        ignore_eos=True))
    tokens = [o.outputs[0].token_ids for o in outs]
    gaps = [teacher_forced_gaps(hf, p, t, "cpu") for p, t in zip(prompts, tokens)]
    worst = max(range(len(prompts)), key=lambda i: float(gaps[i].max()))
    step = int(gaps[worst].argmax())
    margins = {}

    def keep(name):
        def hook(_module, _inputs, out):
            logits = (out[0] if isinstance(out, tuple) else out).reshape(-1, 8).float()
            top = logits.topk(3, dim=-1).values
            margins[name] = top[:, 1] - top[:, 2]
        return hook
    for name, module in hf.named_modules():
        if name.endswith("mlp.gate"):
            module.register_forward_hook(keep(name))
    seq = prompts[worst] + tokens[worst]
    with torch.no_grad():
        hf(torch.tensor([seq]))
    at = len(prompts[worst]) - 1 + step
    result = {
        "largest_gap_std_per_prompt": [round(float(g.max()), 3) for g in gaps],
        "worst": {"prompt": worst, "step": step, "gap_std": round(float(gaps[worst][step]), 3)},
        "router_2nd_3rd_margin": {
            name: {"at_worst_position": round(float(m[at]), 5),
                   "smallest_up_to_it": round(float(m[:at + 1].min()), 5),
                   "median_over_generated": round(float(m[len(prompts[worst]) - 1:].median()), 5)}
            for name, m in margins.items()}}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "moe_bf16_gaps.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
