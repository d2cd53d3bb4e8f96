"""Engines of every layout one after another in ONE process, each ended another way.

``python lifecycle_job.py MODEL RESULT.json``: TP=1 (``with``) -> TP=2 (``shutdown()``,
and a second multi-process engine refused while it runs) -> PP=2 (``del``, with the gc
off: reference counting alone must end it) -> TP=2 x PP=2 (``with``) -> TP=1 -> TP=2 left
running at interpreter exit. After each end: no process group, the cores back, every
worker of that engine gone. The result holds each engine's tokens and worker pids.
"""
import gc
import json
import os
import sys

import torch
import torch.distributed as dist

from kubellm.runtime import LLM, SamplingParams

PROMPTS = [list(range(1000, 1012)) + [2000 + 7 * i, 2001 + 7 * i] for i in range(4)]
PARAMS = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
ENGINE = dict(dtype="float32", device="cpu", block_size=4, num_kv_blocks=40, max_model_len=56)


def is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "State:\tZ" not in fh.read()
    except (FileNotFoundError, ProcessLookupError):   # gone, also while being read
        return False


def main(model: str, result_path: str) -> None:
    threads = torch.get_num_threads()
    result = {"tokens": [], "pids": []}

    def run(llm) -> None:
        result["tokens"].append([o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)])
        supervisor = getattr(llm.engine.executor, "supervisor", None)
        result["pids"].append(sorted(supervisor.pids.values()) if supervisor else [])

    def check_ended() -> None:
        assert not dist.is_initialized(), "the process group outlived its engine"
        assert torch.get_num_threads() == threads, "the driver's cores were not given back"
        alive = [p for p in result["pids"][-1] if is_running(p)]
        assert not alive, f"workers {alive} outlived their engine"

    with LLM(model, **ENGINE) as llm:                                  # TP=1
        run(llm)
    llm = LLM(model, **ENGINE, tensor_parallel_size=2)                 # TP=2
    run(llm)
    try:
        LLM(model, **ENGINE, pipeline_parallel_size=2)
    except RuntimeError as exc:
        result["refused"] = str(exc)
    llm.shutdown()
    check_ended()
    llm = LLM(model, **ENGINE, pipeline_parallel_size=2)               # PP=2
    run(llm)
    gc.collect()
    gc.disable()
    del llm
    check_ended()
    gc.enable()
    with LLM(model, **ENGINE, tensor_parallel_size=2, pipeline_parallel_size=2) as llm:
        run(llm)
    check_ended()
    with LLM(model, **ENGINE) as llm:                                  # TP=1
        run(llm)
    at_exit = LLM(model, **ENGINE, tensor_parallel_size=2)             # ended at exit
    run(at_exit)
    with open(result_path, "w") as fh:
        json.dump(result, fh)
    sys.stdout.flush()


if __name__ == "__main__":
    os.environ.setdefault("KUBELLM_DEVICE", "cpu")
    main(sys.argv[1], sys.argv[2])
