"""One configuration of the multi-GPU benchmark, in its own process (a configuration that
fails or hangs takes nothing of the others' down with it):

    python -m benchmarks.gpu.multi_gpu_job JOB.json RESULT.json

JOB holds ``model``, ``engine`` (LLM keyword arguments), ``check_prompts`` (greedy,
top-5 logprobs kept for the agreement rule), ``w_prompts`` + ``output_len`` (workload W)
and ``timing_every`` (KUBELLM_COMM_TIMING: collective times every N-th step).
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch

CHECK_TOKENS = 16


def main(job_path: str, result_path: str) -> None:
    with open(job_path) as fh:
        job = json.load(fh)
    from kubellm.runtime import LLM
    from kubellm.runtime.parallel import comm_timing
    os.environ[comm_timing.ENV] = str(job["timing_every"])  # workers inherit our env
    t0 = time.perf_counter()
    llm = LLM(job["model"], **job["engine"])
    result = {"startup_s": round(time.perf_counter() - t0, 1),
              "num_kv_blocks": llm.engine.kv.num_blocks,
              "device": torch.cuda.get_device_name() if job["engine"]["device"] == "cuda"
              else "cpu"}
    if job.get("check_prompts"):
        result["check"] = greedy_top5(llm, job["check_prompts"])
    if job.get("w_prompts"):
        result["w"] = run_w(llm, job["w_prompts"], job["output_len"])
    llm.shutdown()
    with open(result_path, "w") as fh:
        json.dump(result, fh)


def greedy_top5(llm, prompts) -> dict:
    from kubellm.runtime import SamplingParams
    params = SamplingParams(temperature=0, max_tokens=CHECK_TOKENS, ignore_eos=True,
                            logprobs=5, detokenize=False)
    outs = [o.outputs[0] for o in llm.generate(prompts, params)]
    # logprobs also hold the sampled token: keep exactly the 5 most likely
    top5 = [[sorted(step, key=step.get, reverse=True)[:5] for step in o.logprobs]
            for o in outs]
    return {"token_ids": [list(o.token_ids) for o in outs], "top5": top5}


def run_w(llm, prompts, output_len: int) -> dict:
    from kubellm.runtime import SamplingParams
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True,
                            detokenize=False)
    llm.generate(prompts[:8], params.clone(max_tokens=8))          # warm-up
    first_step = _num_steps(engine)
    steps_before = engine.timings["steps"]
    _sync()
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    _sync()
    elapsed = time.perf_counter() - t0
    num_steps = engine.timings["steps"] - steps_before
    n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    n_in = sum(map(len, prompts))
    return {"elapsed_s": round(elapsed, 3), "output_tok_s": round(n_out / elapsed, 1),
            "total_tok_s": round((n_in + n_out) / elapsed, 1), "output_tokens": n_out,
            "input_tokens": n_in, "steps": num_steps,
            "step_ms": round(elapsed / num_steps * 1e3, 3),
            "preemptions": engine.scheduler.num_preemptions,
            "comm_by_rank": comm_by_rank(engine, first_step)}


def comm_by_rank(engine, first_step: int) -> list[dict] | None:
    """Per rank: mean ms per timed step of the measured run in each kind of collective."""
    from kubellm.runtime.parallel.comm_timing import per_step_ms
    executor = engine.executor
    if not hasattr(executor, "describe_ranks"):
        return None     # one process: no collectives
    return [{"rank": r["rank"], "tp_rank": r["tp_rank"], "pp_rank": r["pp_rank"],
             **per_step_ms(r["comm"], first_step, _num_steps(engine))}
            for r in executor.describe_ranks()]


def _num_steps(engine) -> int:
    return getattr(engine.executor, "num_steps", 0)


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
