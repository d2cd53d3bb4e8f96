"""The multi-process engine against the single-process one on workload W, in one process
and one run, and the GPU memory each engine leaves behind once shut down.

    python -m benchmarks.gpu.mp_engine --out DIR          # one GPU: Llama-3-8B shape, W
    python -m benchmarks.gpu.mp_engine --smoke --out DIR  # CPU, gloo, tiny shape (CI)

Engines, one after another in this process: ``uni`` (the model in this process), ``mp``
(``distributed_executor_backend=mp`` at TP = PP = 1: a one-rank NCCL group, every step
through StepWork on the control group, the pipeline stage, its CUDA graphs and the
driver's sampler — what a TP/PP engine does, minus the other ranks), then ``uni`` again
(drift, and a third start in the same process). Both run with CUDA graphs and async
scheduling (the defaults) on the same dummy weights; the first W run of each uses W's
prompts, the second the same lengths with other tokens. Reported: output tok/s per run,
mp's best over uni's best, whether their greedy tokens agree, and memory after each
shutdown against the baseline after the first (which created cuBLAS workspaces, Triton
caches and the CUDA context for good). Writes mp_engine.json and mp_engine.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common.shapes import write_config
from benchmarks.gpu import workload_w

CHECK_PROMPTS, CHECK_TOKENS = 8, 16
PLAN = (("uni", 2), ("mp", 2), ("uni", 1))   # (backend, W runs)


def memory() -> dict | None:
    """What the process holds on the GPU now (None on the CPU)."""
    if workload_w.DEVICE != "cuda":
        return None
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"allocated_mib": round(torch.cuda.memory_allocated() / 2**20, 1),
            "reserved_mib": round(torch.cuda.memory_reserved() / 2**20, 1),
            "device_used_mib": round((total - free) / 2**20, 1)}


def greedy_tokens(llm, prompts) -> list[list[int]]:
    from kubellm.runtime import SamplingParams
    params = SamplingParams(temperature=0, max_tokens=CHECK_TOKENS, ignore_eos=True,
                            detokenize=False)
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params)]


def run_engine(backend: str, model_dir: str, num_runs: int) -> dict:
    llm, startup = workload_w.make_llm(model_dir, distributed_executor_backend=backend)
    try:
        tokens = greedy_tokens(llm, workload_w.workload(seed=99)[:CHECK_PROMPTS])
        runs = [workload_w.run_ours(llm, workload_w.workload(seed=i)) for i in range(num_runs)]
    finally:
        llm.shutdown()
    result = {"backend": backend, "startup_s": round(startup, 1), "tokens": tokens,
              "output_tok_s": [r["output_tok_s"] for r in runs],
              "host_ms_per_step": [r["host_ms_per_step"] for r in runs],
              "wait_ms_per_step": [r["wait_ms_per_step"] for r in runs],
              "memory_after_shutdown": memory()}
    print(backend, {k: v for k, v in result.items() if k != "tokens"}, flush=True)
    return result


def summarize(engines: list[dict]) -> dict:
    best = {b: max(t for e in engines if e["backend"] == b for t in e["output_tok_s"])
            for b in ("uni", "mp")}
    baseline = engines[0]["memory_after_shutdown"]
    growth = None
    if baseline is not None:
        growth = {e["backend"] + f"#{i}": {k: round(v - baseline[k], 1)
                                           for k, v in e["memory_after_shutdown"].items()}
                  for i, e in enumerate(engines)}
    return {"best_output_tok_s": best, "mp_over_uni": round(best["mp"] / best["uni"], 4),
            "tokens_agree": all(e["tokens"] == engines[0]["tokens"] for e in engines),
            "memory_vs_first_shutdown_mib": growth}


def write_report(result: dict, out: Path) -> str:
    s = result["summary"]
    lines = ["# Multi-process engine (one rank) vs single-process, workload W", "",
             f"device: {result['device']}, torch {result['torch']}", "",
             "| engine | W output tok/s per run | host ms/step | startup s |",
             "|---|---|---|---|"]
    for e in result["engines"]:
        lines.append(f"| {e['backend']} | {', '.join(map(str, e['output_tok_s']))} | "
                     f"{', '.join(map(str, e['host_ms_per_step']))} | {e['startup_s']} |")
    lines += ["", f"mp / uni (best runs): **{s['mp_over_uni']}**; greedy tokens agree: "
                  f"{s['tokens_agree']}", "",
              f"memory after each shutdown minus after the first (MiB): "
              f"{json.dumps(s['memory_vs_first_shutdown_mib'])}", ""]
    text = "\n".join(lines)
    (out / "mp_engine.md").write_text(text)
    (out / "mp_engine.json").write_text(json.dumps(result, indent=1))
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--smoke", action="store_true", help="tiny shape and workload, CPU")
    args = ap.parse_args()
    if args.smoke:
        workload_w.use_smoke_sizes()
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = write_config(workload_w.SHAPE, Path(tempfile.mkdtemp()) / "model")
    result = {"device": torch.cuda.get_device_name() if workload_w.DEVICE == "cuda" else "cpu",
              "torch": torch.__version__, "memory_before": memory(), "engines": []}
    t0 = time.perf_counter()
    for backend, num_runs in PLAN:
        result["engines"].append(run_engine(backend, model_dir, num_runs))
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    result["summary"] = summarize(result["engines"])
    print(write_report(result, out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
