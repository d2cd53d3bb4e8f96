"""``kubellm bench throughput``: offline throughput on random-token prompts with a fixed
output length (EOS ignored), optionally against transformers ``generate()`` in static
batches on the same prompts in the same run."""
from __future__ import annotations

import argparse
import json
import random
import time

from kubellm.runtime.cli.engine_args import add_engine_args, engine_config_from_args


def add_throughput_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="model directory (default: embedded model)")
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--input-len", type=int, default=128,
                   help="prompt length, or the low end with --input-len-max")
    p.add_argument("--input-len-max", type=int, default=None,
                   help="draw prompt lengths uniformly in [input-len, input-len-max]")
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--dataset-seed", type=int, default=0)
    p.add_argument("--compare-hf", action="store_true",
                   help="also time transformers generate() on the same prompts")
    p.add_argument("--hf-batch-size", type=int, default=64)
    p.add_argument("--json", action="store_true", help="last line: one JSON object")
    add_engine_args(p)


def make_prompts(num: int, low: int, high: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    lengths = [rng.randint(low, high) for _ in range(num)]
    # stay clear of the special tokens at both ends of typical vocabularies
    return [[rng.randrange(16, vocab - 16) for _ in range(n)] for n in lengths]


def run_throughput(args: argparse.Namespace) -> int:
    from kubellm.runtime.engine.llm import LLM
    from kubellm.runtime.core.sampling_params import SamplingParams

    config = engine_config_from_args(args, model=args.model)
    llm = LLM(config=config)
    engine = llm.engine
    prompts = make_prompts(args.num_prompts, args.input_len,
                           args.input_len_max or args.input_len, engine.executor.vocab_size,
                           args.dataset_seed)
    params = SamplingParams(temperature=0.0, max_tokens=args.output_len, ignore_eos=True,
                            detokenize=False)
    llm.generate(prompts[:2], params.clone(max_tokens=2))          # warm-up
    start = time.perf_counter()
    outs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - start
    num_in = sum(map(len, prompts))
    num_out = sum(len(o.outputs[0].token_ids) for o in outs)
    result = {"num_prompts": len(prompts), "input_tokens": num_in, "output_tokens": num_out,
              "elapsed_s": round(elapsed, 3), "output_tok_s": round(num_out / elapsed, 1),
              "total_tok_s": round((num_in + num_out) / elapsed, 1),
              "device": str(engine.executor.device), "dtype": str(engine.executor.dtype)}
    print(f"kubellm: {num_out} output tokens in {elapsed:.2f}s: "
          f"{result['output_tok_s']} output tok/s, {result['total_tok_s']} total tok/s")
    if args.compare_hf:
        hf = hf_generate_throughput(engine.model_dir, prompts, args.output_len,
                                    args.hf_batch_size, engine.executor.device,
                                    engine.executor.dtype)
        result.update(hf)
        # a loaded machine can round a slow rate to 0: no ratio then, rather than a crash
        result["speedup_vs_hf"] = (round(result["output_tok_s"] / hf["hf_output_tok_s"], 2)
                                   if hf["hf_output_tok_s"] else None)
        print(f"transformers generate() (static batches of {args.hf_batch_size}): "
              f"{hf['hf_output_tok_s']} output tok/s; kubellm/hf = {result['speedup_vs_hf']}x")
    if args.json:
        print(json.dumps(result))
    return 0


def hf_generate_throughput(model_dir, prompts, output_len, batch_size, device, dtype) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    pad = 0
    batches = [prompts[i:i + batch_size] for i in range(0, len(prompts), batch_size)]

    def run(batch):
        width = max(map(len, batch))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch],
                            device=device)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=output_len, min_new_tokens=output_len,
                                 pad_token_id=pad)
        return out.shape[1] - width

    run(batches[0][:2])  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    num_out = sum(run(b) * len(b) for b in batches)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    num_in = sum(map(len, prompts))
    return {"hf_elapsed_s": round(elapsed, 3), "hf_output_tok_s": round(num_out / elapsed, 1),
            "hf_total_tok_s": round((num_in + num_out) / elapsed, 1)}
