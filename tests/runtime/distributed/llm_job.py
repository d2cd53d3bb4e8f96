"""One offline generation in its own process (a process holds one multi-process engine at
a time, and a test's process stays clear of torch.distributed's process-wide state).

``python llm_job.py JOB.json RESULT.json``; the job holds ``model``, ``engine`` (LLM
keyword arguments), ``prompts`` and ``params`` (one SamplingParams dict per prompt).
With ``idle_s`` it sleeps that long and generates again. The result holds each prompt's
token ids, engine counters, how many steps were launched with late tokens (async
scheduling: inputs still being sampled by the step before) and, for a multi-process
engine, what every rank holds.
"""
import json
import sys
import time

from kubellm.runtime import LLM, SamplingParams


def main(job_path: str, result_path: str) -> None:
    with open(job_path) as fh:
        job = json.load(fh)
    llm = LLM(job["model"], **job["engine"])
    late_steps = count_late_steps(llm.engine.executor)
    params = [SamplingParams(**p) for p in job["params"]]
    outputs = llm.generate(job["prompts"], params)
    if job.get("idle_s"):  # then the same again: workers must outlive a quiet spell
        time.sleep(job["idle_s"])
        again = llm.generate(job["prompts"], params)
        job["token_ids_after_idle"] = [o.outputs[0].token_ids for o in again]
    engine = llm.engine
    executor = engine.executor
    result = {
        "token_ids": [o.outputs[0].token_ids for o in outputs],
        "num_preemptions": engine.scheduler.num_preemptions,
        "prefix_hits": engine.kv.prefix_hits,
        "num_kv_blocks": engine.kv.num_blocks,
        "token_ids_after_idle": job.get("token_ids_after_idle"),
        "ranks": executor.describe_ranks() if hasattr(executor, "describe_ranks") else None,
        "run_ahead": engine.run_ahead, "late_steps": late_steps[0],
    }
    llm.shutdown()
    with open(result_path, "w") as fh:
        json.dump(result, fh)


def count_late_steps(executor) -> list[int]:
    counter, launch = [0], executor.launch

    def counting_launch(out, tables, ahead_of=None):
        counter[0] += any(s.start == len(s.request.all_token_ids) for s in out.scheduled)
        return launch(out, tables, ahead_of)
    executor.launch = counting_launch
    return counter


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
