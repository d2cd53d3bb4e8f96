"""Variable-length offline workloads against their limit, several seeds, one run.

``chat`` (the default): 1,000 requests whose prompt and output lengths are long-tailed,
as chat traffic is: lognormal with medians 256 (prompt) and 128 (output) tokens and
sigma 1 (means ~420 and ~210; 1 in 150 prompts and 1 in 50 outputs reach the caps),
prompts clipped to [16, 3000] and outputs to [4, 1024]; random token ids; every request
exactly its output length (EOS ignored); all submitted at once. ``prefill_heavy``: 256
prompts of 3,000-4,000 tokens, 48-80 out. ``long``: four prompts of 30,000 tokens, 64
out. Llama-3-8B shape (``--shape qwen2.5-0.5b``: a small model, where the host's work
per step weighs most), bf16, random weights.

Each seed's limit is W's rule (benchmarks/common/limits.py) on its own lengths, from
ceilings measured in this run, plus the strict limit (decode GEMMs compute-bound). The
engine runs with the hardware-aware defaults (nothing set but max_model_len), and once
more on the first seed with the previous fixed defaults (256 sequences, 2,048 tokens a
step, graphs every 16): the part of the gap that was the defaults. Per run: where the
wall time went by kind of step (mixed, decode with few or many sequences) from each
step's launch times.

    python -m benchmarks.gpu.varlen --out DIR [--workload chat] [--seeds 0,1,2]
    python -m benchmarks.gpu.varlen --smoke --out DIR     # tiny, on the CPU
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import long_split, tile_config
from benchmarks.common.ceilings import measure_ceilings
from benchmarks.common.limits import workload_limit
from benchmarks.common.shapes import LLAMA3_8B, SHAPES, write_config

SMOKE_SHAPE = {**LLAMA3_8B, "vocab_size": 2048, "hidden_size": 64, "intermediate_size": 128,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
OLD_DEFAULTS = dict(max_num_seqs=256, max_num_batched_tokens=2048,
                    cuda_graph_sizes="1,2,4,8," + ",".join(map(str, range(16, 257, 16))))
FEW_SEQS = 32   # a decode step of at most this many sequences reads weights for little


def lognormal_lengths(rng, n, median, sigma, low, high) -> list[int]:
    return [min(high, max(low, round(median * math.exp(rng.gauss(0.0, sigma)))))
            for _ in range(n)]


def lengths(workload: str, seed: int, smoke: bool) -> tuple[list[int], list[int]]:
    """(prompt lengths, output lengths) of one seed of ``workload``."""
    rng = random.Random(seed)
    scale = 0.02 if smoke else 1.0      # the smoke run: the same shapes, tiny
    if workload == "chat":
        n = 12 if smoke else 1000
        prompts = lognormal_lengths(rng, n, 256 * scale, 1.0, 4 if smoke else 16,
                                    int(3000 * scale) or 60)
        outputs = lognormal_lengths(rng, n, max(2, 128 * scale), 1.0, 2 if smoke else 4,
                                    max(8, int(1024 * scale)))
    elif workload == "prefill_heavy":
        n = 8 if smoke else 256
        prompts = [rng.randint(int(3000 * scale), int(4000 * scale)) for _ in range(n)]
        outputs = [rng.randint(max(2, int(48 * scale)), max(3, int(80 * scale)))
                   for _ in range(n)]
    elif workload == "long":
        prompts, outputs = [int(30000 * scale)] * 4, [max(2, int(64 * scale))] * 4
    else:
        raise ValueError(f"unknown workload {workload!r}")
    return prompts, outputs


def token_ids(prompt_lens, seed, vocab) -> list[list[int]]:
    rng = random.Random(10_000 + seed)
    return [[rng.randrange(16, vocab - 16) for _ in range(n)] for n in prompt_lens]


def step_profile(launches, end_time: float) -> dict:
    """Wall seconds from each step's launch to the next, by kind of step."""
    kinds = {"mixed_s": 0.0, "decode_few_s": 0.0, "decode_many_s": 0.0}
    counts = {"mixed_steps": 0, "decode_few_steps": 0, "decode_many_steps": 0}
    for (t, tokens, seqs), (t_next, _, _) in zip(launches, launches[1:] + [(end_time, 0, 0)]):
        kind = "mixed" if tokens != seqs else "decode_few" if seqs <= FEW_SEQS else "decode_many"
        kinds[f"{kind}_s"] += t_next - t
        counts[f"{kind}_steps"] += 1
    seqs = [s for _, n, s in launches if n == s]
    return {**{k: round(v, 3) for k, v in kinds.items()}, **counts,
            "mean_decode_batch": round(sum(seqs) / max(1, len(seqs)), 1)}


def run(llm, prompts, outputs, device: str) -> dict:
    from kubellm.runtime import SamplingParams
    engine = llm.engine
    launches = []
    launch = engine.executor.launch

    def timed_launch(out, tables, ahead_of=None):
        launches.append((time.perf_counter(), out.num_batched_tokens, len(out.scheduled)))
        return launch(out, tables, ahead_of)
    engine.executor.launch = timed_launch
    params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True, detokenize=False)
              for o in outputs]
    from kubellm.runtime.worker import compile_watch
    preempted = engine.scheduler.num_preemptions
    compiled = compile_watch.compiles_after_startup
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - t0
    del engine.executor.launch
    n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    n_in = sum(map(len, prompts))
    return {"elapsed_s": round(elapsed, 3), "output_tok_s": round(n_out / elapsed, 1),
            "total_tok_s": round((n_in + n_out) / elapsed, 1), "output_tokens": n_out,
            "input_tokens": n_in, "steps": len(launches),
            "preemptions": engine.scheduler.num_preemptions - preempted,
            # Triton compiles inside the timed run (a first process on a fresh machine ran
            # 16% slower than later ones in s21 call 82; this says whether compiles did it)
            "late_compiles": compile_watch.compiles_after_startup - compiled,
            **step_profile([(t - t0, n, s) for t, n, s in launches], elapsed)}


def make_llm(model_dir, device, dtype, max_model_len, **fields):
    from kubellm.runtime import LLM
    t0 = time.perf_counter()
    llm = LLM(model_dir, load_format="dummy", skip_tokenizer_init=True, device=device,
              dtype=dtype, max_model_len=max_model_len, **fields)
    config = llm.engine.config
    return llm, {"startup_s": round(time.perf_counter() - t0, 1),
                 "max_num_seqs": config.max_num_seqs,
                 "max_num_batched_tokens": config.max_num_batched_tokens,
                 "kernel_switches": llm.engine.executor.switches.describe(),
                 "num_kv_blocks": llm.engine.kv.num_blocks}


def warm_up(llm, vocab, longest: int):
    """Every kernel variant compiled (and autotuned) before the timed runs: prompts up
    to the workload's longest."""
    from kubellm.runtime import SamplingParams
    rng = random.Random(99)
    lens = sorted({max(1, longest // 8), max(1, longest // 2), longest})
    llm.generate([[rng.randrange(16, vocab - 16) for _ in range(n)] for n in lens],
                 SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, detokenize=False))


def run_seeds_on_engine(name, fields, run_seeds, args, cases, result, shape, device, dtype,
                        max_model_len, model_dir) -> None:
    """One engine (``fields`` over the defaults) on each of ``run_seeds``: rows into
    ``result["runs"]``."""
    llm, setup = make_llm(model_dir, device, str(dtype)[6:], max_model_len, **fields)
    print(name, setup, flush=True)
    warm_up(llm, shape["vocab_size"], max(max(p) for p, _ in cases.values()))
    for seed in run_seeds:
        prompt_lens, output_lens = cases[seed]
        limit = workload_limit(shape, prompt_lens, output_lens, result["ceilings"],
                               dtype.itemsize)
        llm.reset_prefix_cache()   # a run computes its prompts whatever ran before it
        measured = run(llm, token_ids(prompt_lens, seed, shape["vocab_size"]), output_lens,
                       device)
        row = {"engine": name, "seed": seed, **setup, **measured, "limit": limit,
               "fraction_of_limit": round(measured["output_tok_s"] /
                                          limit["limit_output_tok_s"], 3),
               "fraction_of_strict_limit": round(measured["output_tok_s"] /
                                                 limit["strict_limit_output_tok_s"], 3)}
        result["runs"].append(row)
        print(json.dumps(row), flush=True)
    del llm
    if device == "cuda":
        torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--workload", default="chat", choices=["chat", "prefill_heavy", "long"])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--skip-old-defaults", action="store_true")
    ap.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES))
    ap.add_argument("--with-switches", default="",
                    help="kernel switches (--kernel-switches text): one more engine with "
                         "them over the defaults, on the same seeds, right after the defaults")
    tile_config.add_options(ap, "one more engine, on the same seeds, after the defaults")
    ap.add_argument("--smoke", action="store_true", help="tiny shape and lengths on the CPU")
    ap.add_argument("--long-split", default="", help=long_split.HELP)
    args = ap.parse_args()
    long_split.apply(args.long_split)
    tiles = tile_config.from_args(args)   # a bad text fails before any run
    smoke = args.smoke
    device, dtype = ("cpu", torch.float32) if smoke else ("cuda", torch.bfloat16)
    shape = SMOKE_SHAPE if smoke else SHAPES[args.shape]
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "torch": torch.__version__, "workload": args.workload,
              "long_split": args.long_split or None,
              "shape": "smoke" if smoke else args.shape, "runs": []}
    result["ceilings"] = measure_ceilings(device, dtype)
    print("ceilings:", result["ceilings"], flush=True)
    cases = {seed: lengths(args.workload, seed, smoke) for seed in seeds}
    max_model_len = max(p + o for p_lens, o_lens in cases.values()
                        for p, o in zip(p_lens, o_lens))
    max_model_len = 1 << (max_model_len - 1).bit_length()
    model_dir = write_config(shape, Path(tempfile.mkdtemp()) / "model")
    engines = [("hardware_aware_defaults", {}, seeds, {})]
    if args.with_switches:
        engines.append((f"with_switches:{args.with_switches}",
                        {"kernel_switches": args.with_switches}, seeds, {}))
    if any(tiles.values()):
        engines.append((f"with_tile_config:{tile_config.describe(**tiles)}", {}, seeds,
                        tiles))
    if not args.skip_old_defaults:
        engines.append(("previous_fixed_defaults", OLD_DEFAULTS, seeds[:1], {}))
    for name, fields, run_seeds, engine_tiles in engines:
        with tile_config.active(**engine_tiles):
            run_seeds_on_engine(name, fields, run_seeds, args, cases, result, shape, device,
                                dtype, max_model_len, model_dir)
    ours = [r["fraction_of_limit"] for r in result["runs"]
            if r["engine"] == "hardware_aware_defaults"]
    result["mean_fraction_of_limit"] = round(sum(ours) / len(ours), 3)
    suffix = "" if smoke or args.shape == "llama3-8b" else f"_{args.shape}"
    (out / f"varlen_{args.workload}{suffix}.json").write_text(json.dumps(result, indent=1))
    print(f"{args.workload}: fraction of limit per seed {ours}, mean "
          f"{result['mean_fraction_of_limit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
