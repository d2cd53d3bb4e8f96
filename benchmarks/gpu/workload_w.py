"""Workload W of BENCHMARKS.md on one GPU, with the peer and the limit in the same run.

Llama-3-8B shape, bf16, random weights; 256 requests with prompt lengths uniform in
[128, 1024] (random.Random(0)), random token ids, exactly 256 output tokens, greedy.
Measures our output/total tok/s; transformers generate() in static batches of 64 with
left padding; the limit estimated from matmul and copy ceilings measured here; the host
(CPU) share of a decode step at batch 256; and decode throughput against batch size and
context length (PNG).

    python -m benchmarks.gpu.workload_w --out DIR [--compare-hf]
    python -m benchmarks.gpu.workload_w --smoke --out DIR --compare-hf   # tiny, on CPU:
                                                  # catches script errors before GPU time
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import ceilings, limits
from benchmarks.common.shapes import LLAMA3_8B, write_config

NUM_REQUESTS, LOW, HIGH, OUTPUT_LEN = 256, 128, 1024, 256
SHAPE, DEVICE, DTYPE = LLAMA3_8B, "cuda", torch.bfloat16
SMOKE_SHAPE = {**LLAMA3_8B, "vocab_size": 2048, "hidden_size": 64, "intermediate_size": 128,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def measure_ceilings() -> dict:
    return ceilings.measure_ceilings(DEVICE, DTYPE)


def workload(seed: int = 0) -> list[list[int]]:
    """W's prompts: fixed lengths, random tokens (another ``seed``, the same lengths but no
    shared prefix: a second run on one engine must not hit the prefix cache)."""
    rng = random.Random(0)
    lengths = [rng.randint(LOW, HIGH) for _ in range(NUM_REQUESTS)]
    if seed:
        rng = random.Random(seed)
    return [[rng.randrange(16, SHAPE["vocab_size"] - 16) for _ in range(n)] for n in lengths]


def limit_estimate(prompts, ceilings) -> dict:
    return limits.workload_limit(SHAPE, [len(p) for p in prompts], [OUTPUT_LEN] * len(prompts),
                                 ceilings, torch.finfo(DTYPE).bits // 8)


def _alloc_retries() -> int:
    return torch.cuda.memory_stats().get("num_alloc_retries", 0) if DEVICE == "cuda" else 0


def make_llm(model_dir, **overrides):
    from kubellm.runtime import LLM
    t0 = time.perf_counter()
    llm = LLM(model_dir, **{**dict(
        load_format="dummy", skip_tokenizer_init=True, max_model_len=10240,
        max_num_seqs=256, max_num_batched_tokens=8192, gpu_memory_utilization=0.9,
        device=DEVICE, dtype=str(DTYPE).removeprefix("torch.")), **overrides})
    return llm, time.perf_counter() - t0


def run_ours(llm, prompts, async_scheduling: bool = True) -> dict:
    """W through ``llm``, with the engine running ahead of the device (async scheduling,
    the default) or waiting for every step (the same engine switched over)."""
    from kubellm.runtime import SamplingParams
    engine = llm.engine
    engine.set_async_scheduling(async_scheduling)
    params = SamplingParams(temperature=0, max_tokens=OUTPUT_LEN, ignore_eos=True,
                            detokenize=False)
    llm.generate(prompts[:8], params.clone(max_tokens=8))          # warm-up
    engine.set_async_scheduling(async_scheduling)                   # lands the last step
    engine.timings.update(schedule_s=0.0, execute_s=0.0, postprocess_s=0.0, wait_s=0.0,
                          steps=0)
    engine.executor.host_time_s = 0.0
    launches = []                    # (ms to launch, tokens, sequences) per step
    launch = engine.executor.launch

    def timed_launch(out, tables, ahead_of=None):
        t = time.perf_counter()
        handle = launch(out, tables, ahead_of)
        launches.append((round((time.perf_counter() - t) * 1e3, 2), out.num_batched_tokens,
                         len(out.scheduled)))
        return handle
    engine.executor.launch = timed_launch
    retries = _alloc_retries()
    sync()
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - t0
    del engine.executor.launch
    n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    n_in = sum(map(len, prompts))
    t, steps = engine.timings, max(1, engine.timings["steps"])
    host_s = t["schedule_s"] + t["postprocess_s"] + engine.executor.host_time_s
    result = {"async_scheduling": async_scheduling, "elapsed_s": round(elapsed, 3),
              "output_tok_s": round(n_out / elapsed, 1),
              "total_tok_s": round((n_in + n_out) / elapsed, 1), "output_tokens": n_out,
              "input_tokens": n_in, "steps": t["steps"],
              "host_ms_per_step": round(host_s / steps * 1e3, 3),
              "wait_ms_per_step": round(t["wait_s"] / steps * 1e3, 3),
              "num_kv_blocks": engine.kv.num_blocks,
              "preemptions": engine.scheduler.num_preemptions,
              # launching is host work only (the device runs behind), unless something in
              # the forward pass waits for the device: these show where
              "launch_ms_decode_steps": round(sum(ms for ms, n, b in launches if n == b), 1),
              "launch_ms_mixed_steps": round(sum(ms for ms, n, b in launches if n != b), 1),
              "slowest_launches": sorted(launches, reverse=True)[:12],
              # the caching allocator freeing its cache to retry a failed cudaMalloc (a
              # device sync each time): the sign of a KV pool sized too close to the limit
              "allocator_retries": _alloc_retries() - retries}
    engine.set_async_scheduling(True)
    return result


def decode_rate(llm, batch: int, context: int, steps: int = 32,
                output_kind: str = "cumulative", async_scheduling: bool = True) -> dict:
    """Steady decode at ``batch`` sequences of ``context`` tokens: tok/s, the host's work
    per step, and the share of the time the device sat idle waiting for the host (with
    async scheduling the host works while the device runs, so only that share costs).
    ``cumulative`` outputs every step (what the server streams); ``final_only`` is what
    offline ``LLM.generate`` asks for."""
    from kubellm.runtime import SamplingParams
    from kubellm.runtime.cli.bench.steady import fill_until_decoding, time_steps
    engine = llm.engine
    engine.set_async_scheduling(async_scheduling)
    rng = random.Random(batch * 7 + context)
    params = SamplingParams(temperature=0, max_tokens=steps + 8, ignore_eos=True,
                            detokenize=False, output_kind=output_kind)
    ids = [f"d{batch}-{context}-{i}-{async_scheduling}" for i in range(batch)]
    fill_until_decoding(engine, {i: [rng.randrange(16, SHAPE["vocab_size"] - 16)
                                     for _ in range(context)]
                                 for i in ids}, params)
    timed = time_steps(engine, steps)
    for i in ids:
        engine.abort_request(i)
    engine.set_async_scheduling(True)
    return {"batch": batch, "context": context, "output_kind": output_kind,
            "async_scheduling": async_scheduling,
            "decode_tok_s": round(batch * 1e3 / timed["step_ms"], 1),
            "host_ms_per_step": timed["host_ms"],
            "host_fraction": round(timed["host_ms"] / timed["step_ms"], 4), **timed}


def run_hf(model_dir, prompts, batch_size=64) -> dict:
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(model_dir)
    with torch.device(DEVICE):
        model = AutoModelForCausalLM.from_config(config, dtype=DTYPE).eval()

    def run(batch, new_tokens):
        width = max(map(len, batch))
        ids = torch.tensor([[0] * (width - len(p)) + p for p in batch], device=DEVICE)
        mask = (torch.arange(width, device=DEVICE)[None, :] >=
                torch.tensor([width - len(p) for p in batch], device=DEVICE)[:, None]).long()
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           pad_token_id=0)
    run(prompts[:4], 4)
    sync()
    t0 = time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        run(prompts[i:i + batch_size], OUTPUT_LEN)
    sync()
    elapsed = time.perf_counter() - t0
    n_out = len(prompts) * OUTPUT_LEN
    n_in = sum(map(len, prompts))
    del model
    torch.cuda.empty_cache()
    return {"hf_generate_elapsed_s": round(elapsed, 3),
            "hf_generate_output_tok_s": round(n_out / elapsed, 1),
            "hf_generate_total_tok_s": round((n_in + n_out) / elapsed, 1)}


def plot(sweep, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for context in sorted({r["context"] for r in sweep}):
        rows = [r for r in sweep if r["context"] == context]
        if len(rows) > 1:
            axes[0].plot([r["batch"] for r in rows], [r["decode_tok_s"] for r in rows], "o-",
                         label=f"context {context}")
    axes[0].set(xlabel="batch size (sequences decoding)", ylabel="decode tok/s",
                xscale="log", title="Llama-3-8B shape, H200, bf16")
    axes[0].legend()
    for batch in sorted({r["batch"] for r in sweep}):
        rows = [r for r in sweep if r["batch"] == batch]
        if len(rows) > 1:
            axes[1].plot([r["context"] for r in rows], [r["decode_tok_s"] for r in rows], "o-",
                         label=f"batch {batch}")
    axes[1].set(xlabel="context length (tokens)", ylabel="decode tok/s", xscale="log")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def switch_ab(llm, names: list[str]) -> dict:
    """W with the named kernel switches off and on, alternately (off, on, off, on), on
    one engine that has already run W once (so first-use compilation is behind it): the
    steady effect of the switches, apart from the machine's drift. Each run has W's
    lengths with tokens of its own (no prefix-cache hits). CUDA graphs keep what they
    captured; the switches named here act on eager steps (prefills)."""
    switches = llm.engine.executor.switches
    unknown = [n for n in names if not hasattr(switches, n)]
    if unknown:
        raise SystemExit(f"--switch-ab: unknown switches {unknown}")
    before = {n: getattr(switches, n) for n in names}
    runs = {"off": [], "on": []}
    for i, state in enumerate(("off", "on", "off", "on")):
        for n in names:
            setattr(switches, n, state == "on")
        runs[state].append(run_ours(llm, workload(seed=100 + i))["output_tok_s"])
    for n, value in before.items():
        setattr(switches, n, value)
    best = {state: max(rates) for state, rates in runs.items()}
    return {"switches": names, "output_tok_s": runs,
            "on_over_off": round(best["on"] / best["off"], 3)}


def use_smoke_sizes() -> None:
    """The tiny shape and workload on the CPU (--smoke; other scripts reuse it)."""
    global NUM_REQUESTS, LOW, HIGH, OUTPUT_LEN, SHAPE, DEVICE, DTYPE
    NUM_REQUESTS, LOW, HIGH, OUTPUT_LEN = 8, 8, 40, 6
    SHAPE, DEVICE, DTYPE = SMOKE_SHAPE, "cpu", torch.float32


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--compare-hf", action="store_true")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny shape and workload on the CPU, to check the script itself")
    ap.add_argument("--switch-ab", default="",
                    help="kernel switches (comma-separated) to A/B on the same engine after "
                         "the first W: W with them off, on, off, on (then nothing else)")
    args = ap.parse_args()
    if args.smoke:
        use_smoke_sizes()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
              "torch": torch.__version__}
    result["ceilings"] = measure_ceilings()
    print("ceilings:", result["ceilings"], flush=True)
    prompts = workload()
    result["limit"] = limit_estimate(prompts, result["ceilings"])
    model_dir = write_config(SHAPE, Path(tempfile.mkdtemp()) / "model")
    if args.compare_hf:   # first: our engine's CUDA graphs keep its memory until exit
        result["hf"] = run_hf(model_dir, prompts)
        print("hf:", result["hf"], flush=True)
    llm, startup = make_llm(model_dir)
    ours = run_ours(llm, prompts)
    ours["startup_s"] = round(startup, 1)
    ours["kernel_switches"] = llm.engine.executor.switches.describe()
    result["kubellm"] = ours
    if args.switch_ab:
        print("kubellm W, first on this engine (switches:", ours["kernel_switches"] + "):",
              ours["output_tok_s"], flush=True)
        result["switch_ab"] = switch_ab(llm, args.switch_ab.split(","))
        print("switch A/B:", result["switch_ab"], flush=True)
        # and the host's work per decode step at W's decode point (final outputs)
        result["decode_batch256_final_only"] = decode_rate(
            llm, 256 if not args.smoke else 8, 512 if not args.smoke else 16,
            output_kind="final_only")
        print("decode_batch256_final_only", result["decode_batch256_final_only"], flush=True)
        (out / "workload_w.json").write_text(json.dumps(result, indent=1))
        return 0
    result["kubellm_waiting_for_each_step"] = run_ours(llm, workload(seed=1),
                                                       async_scheduling=False)
    print("kubellm W without async scheduling:", result["kubellm_waiting_for_each_step"],
          flush=True)
    result["fraction_of_limit"] = round(ours["output_tok_s"] /
                                        result["limit"]["limit_output_tok_s"], 3)
    result["fraction_of_strict_limit"] = round(
        ours["output_tok_s"] / result["limit"]["strict_limit_output_tok_s"], 3)
    print("kubellm W:", ours, "fraction of limit:", result["fraction_of_limit"],
          "of the strict limit (decode GEMMs compute-bound):",
          result["fraction_of_strict_limit"], flush=True)
    batch = 256 if not args.smoke else 8
    result["decode_batch256"] = decode_rate(llm, batch, 512 if not args.smoke else 16)
    result["decode_batch256_final_only"] = decode_rate(llm, batch, 512 if not args.smoke else 16,
                                                       output_kind="final_only")
    result["decode_batch256_waiting"] = decode_rate(llm, batch, 512 if not args.smoke else 16,
                                                    async_scheduling=False)
    for key in ("decode_batch256", "decode_batch256_final_only", "decode_batch256_waiting"):
        print(key, result[key], flush=True)
    (out / "workload_w.json").write_text(json.dumps(result, indent=1))
    if not args.skip_sweep:
        batches, contexts = ((1, 8, 32, 64, 128, 256), (2048, 8192)) if not args.smoke \
            else ((1, 4), (64,))
        sweep = [decode_rate(llm, b, 512 if not args.smoke else 16, steps=16) for b in batches]
        sweep += [decode_rate(llm, 64 if not args.smoke else 4, c, steps=16) for c in contexts]
        result["sweep"] = sweep
        plot(sweep, out / "throughput_vs_batch_context.png")
        (out / "workload_w.json").write_text(json.dumps(result, indent=1))
    if args.compare_hf:
        result["speedup_vs_hf_generate"] = round(
            ours["output_tok_s"] / result["hf"]["hf_generate_output_tok_s"], 2)
    (out / "workload_w.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("kubellm", "fraction_of_limit",
                                             "fraction_of_strict_limit", "limit")
                      if k in result}))
    print("speedup vs hf generate:", result.get("speedup_vs_hf_generate"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
