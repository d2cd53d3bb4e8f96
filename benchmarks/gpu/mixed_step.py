"""Where a mixed step's time goes: one new prompt joining running decodes.

On the H200 (2026-12-02, serving calls 8-10) a step where a 512-token prompt joined ~20
decodes of a Llama-3-8B shape took 35-73 ms in the engine core, against ~5 ms for a decode
step and ~12 ms that the prompt's FLOPs need at the GEMM rate W reaches; on the CPU the
host phases of that step are 0.4-0.6 ms (benchmarks/cpu/mixed_step_host.py). This times
each step around an arrival (engine.step() wall, and device time per step from CUDA
events), then profiles one arrival with the torch profiler and prints the kernels by
device time, for the mixed step and for a decode step:

    python -m benchmarks.gpu.mixed_step --out DIR [--kernel-switches prefill_attention=off]
    python -m benchmarks.gpu.mixed_step --decodes 160 --context 800 --prompts 12 \
        --prompt 700 --max-model-len 4096 --out DIR  # a chat-like step: 8k batched tokens
    python -m benchmarks.gpu.mixed_step --smoke --out DIR     # tiny shape on the CPU
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.shapes import SHAPES


def sync() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_arrival(engine, prompts, params, request_id: str, steps: int) -> dict:
    """Add ``prompts`` (together), then run ``steps`` steps: each step's engine.step()
    wall ms, and the device ms of each step the runner launched (CUDA events; empty on
    the CPU)."""
    runner = engine.executor   # one process: the model runner (steady.device_idle)
    runner.trace_device(True)
    sync()
    for i, prompt in enumerate(prompts):
        engine.add_request(f"{request_id}.{i}", prompt, params)
    requests = len(engine.output.groups)
    walls = []
    for _ in range(steps):
        start = time.perf_counter()
        engine.step()
        walls.append(round((time.perf_counter() - start) * 1e3, 3))
    sync()
    device = [round(a.elapsed_time(b), 3) for a, b in runner.device_trace or []]
    runner.trace_device(False)
    return {"requests": requests, "step_wall_ms": walls, "step_device_ms": device}


def host_profile(engine, prompts, params, top: int) -> str:
    """cProfile of the step a new prompt joins (synchronised at its end): where the host
    spends a mixed step's wall time when the device waits for it."""
    import cProfile
    import io
    import pstats
    for _ in range(4):
        engine.step()
    sync()
    for i, prompt in enumerate(prompts):
        engine.add_request(f"cprofiled.{i}", prompt, params)
    prof = cProfile.Profile()
    prof.enable()
    engine.step()
    sync()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(top)
    return "--- host functions of the mixed step, by cumulative time ---\n" + text.getvalue()


def kernel_table(profile, top: int) -> str:
    use_cuda = any(getattr(e, "device_type", None) is not None and
                   str(e.device_type).endswith("CUDA") for e in profile.events())
    key = "self_cuda_time_total" if use_cuda else "self_cpu_time_total"
    return profile.key_averages().table(sort_by=key, row_limit=top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama3-8b",
                    choices=sorted(SHAPES),
                    help="the model shape (benchmarks/common/shapes.py; --smoke: a tiny Llama)")
    ap.add_argument("--layers", type=int, help="layers (default: the shape's own)")
    ap.add_argument("--decodes", type=int, default=20)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--prompt", type=int, default=512, help="tokens of each new prompt")
    ap.add_argument("--prompts", type=int, default=1,
                    help="new prompts arriving together (the step takes what fits the "
                         "batched-token budget, 8,192)")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--kernel-switches", default="")
    ap.add_argument("--top", type=int, default=20, help="kernels the profile tables list")
    ap.add_argument("--cprofile", type=int, default=0, metavar="N",
                    help="print the N host functions with the most cumulative time in "
                         "one more mixed step (cProfile)")
    ap.add_argument("--out", default=".")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny shape on the CPU, to check the script itself")
    args = ap.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from kubellm.runtime import LLM, SamplingParams
    from kubellm.runtime.cli.bench.steady import fill_until_decoding
    from kubellm.runtime.core.gc_heap import freeze_startup_heap

    from benchmarks.common.shapes import LLAMA3_8B, SMOKE_LLAMA, write_config
    small = SMOKE_LLAMA if args.smoke else {}
    layers = {"num_hidden_layers": args.layers} if args.layers else {}
    model_dir = write_config(LLAMA3_8B if args.smoke else SHAPES[args.shape],
                             Path(tempfile.mkdtemp()) / "m", **layers, **small)
    llm = LLM(model_dir, load_format="dummy", skip_tokenizer_init=True,
              max_model_len=args.max_model_len,
              max_num_seqs=256, max_num_batched_tokens=8192,
              kernel_switches=args.kernel_switches)
    engine = llm.engine
    vocab = engine.vocab_size
    rng = random.Random(0)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(16, vocab - 16) for _ in range(n)]

    def arrivals() -> list[list[int]]:
        return [prompt(args.prompt) for _ in range(args.prompts)]
    params = SamplingParams(temperature=0, max_tokens=1500, ignore_eos=True,
                            detokenize=False)
    fill_until_decoding(engine, {f"d{i}": prompt(args.context) for i in range(args.decodes)},
                        params)
    freeze_startup_heap()   # as the engine core process does: no full collections
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for k in range(args.repeats):
        for _ in range(4):   # decode steps between arrivals
            engine.step()
        row = {"arrival": k, "switches": args.kernel_switches,
               **timed_arrival(engine, arrivals(), params, f"new{k}", 4)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    later = rows[1:] or rows   # the first arrival also pays one-off costs
    summary = {"switches": args.kernel_switches or "defaults",
               "mixed_step_wall_ms_median": statistics.median(r["step_wall_ms"][0] for r in later)}
    if later[0]["step_device_ms"]:
        summary["mixed_step_device_ms_median"] = statistics.median(
            r["step_device_ms"][0] for r in later)
        summary["decode_step_device_ms_median"] = statistics.median(
            r["step_device_ms"][-1] for r in later)
    print("summary", json.dumps(summary), flush=True)
    if args.cprofile:
        print(host_profile(engine, arrivals(), params, args.cprofile), flush=True)
    activities = [ProfilerActivity.CPU] + \
        ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    for name, add in (("decode", False), ("mixed", True)):
        for _ in range(4):
            engine.step()
        sync()
        with profile(activities=activities) as prof:
            if add:
                for i, tokens in enumerate(arrivals()):
                    engine.add_request(f"profiled.{i}", tokens, params)
            for _ in range(2):
                engine.step()
            sync()
        table = kernel_table(prof, args.top)
        (out / f"mixed_step_profile_{name}.txt").write_text(table)
        print(f"--- {name} step (+ the next), by device time ---\n{table}", flush=True)
    (out / "mixed_step.json").write_text(json.dumps(
        {"summary": summary, "shape": "smoke" if args.smoke else args.shape,
         "layers": args.layers, "decodes": args.decodes, "context": args.context,
         "prompt": args.prompt, "prompts": args.prompts, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
