"""A randomized mix through a small KV pool: n>1, priorities, stop strings, aborts and
preemption together. Every greedy request must produce what it produces alone, every
block must come back, and every request must end."""
from __future__ import annotations

import random

import pytest

from kubellm.runtime import LLM, SamplingParams


@pytest.fixture(scope="module")
def alone(tiny_model_dir):
    """Reference engine: one request at a time, a roomy pool, no prefix cache."""
    return LLM(tiny_model_dir, enable_prefix_caching=False, max_model_len=512)


@pytest.mark.parametrize("policy", ["fcfs", "priority", "timeslice"])
def test_random_mix_matches_requests_run_alone(tiny_model_dir, alone, policy):
    rng = random.Random(hash(policy) % 1000)
    llm = LLM(tiny_model_dir, scheduling_policy=policy, num_kv_blocks=12, block_size=8,
              max_num_seqs=6, max_num_batched_tokens=48, timeslice_steps=3, max_model_len=512)
    engine = llm.engine
    shared = [rng.randrange(100, 49000) for _ in range(24)]
    requests = {}
    for i in range(14):
        prompt = (shared if i % 3 == 0 else []) + [rng.randrange(100, 49000)
                                                   for _ in range(rng.randint(2, 30))]
        params = SamplingParams(temperature=0.0, max_tokens=rng.randint(1, 24),
                                ignore_eos=True, n=rng.choice([1, 1, 2]))
        requests[f"r{i}"] = (prompt, params, rng.randint(0, 3))
    for rid, (prompt, params, prio) in requests.items():
        engine.add_request(rid, prompt, params, priority=prio)
    to_abort = {"r4", "r9"}
    finals, steps = {}, 0
    while engine.has_unfinished_requests():
        steps += 1
        assert steps < 2000, "the engine stopped making progress"
        for out in engine.step():
            if out.finished:
                finals[out.request_id] = out
        if steps == 3:
            for rid in to_abort:
                engine.abort_request(rid)
    assert set(finals) | to_abort >= set(requests) - to_abort
    for rid, out in finals.items():
        prompt, params, _ = requests[rid]
        want = alone.generate([prompt], params.clone(n=1))[0].outputs[0].token_ids
        for sample in out.outputs:      # greedy: every sample equals the lone run
            assert sample.token_ids == want, (rid, sample.index)
            assert sample.finish_reason == "length"
    assert engine.kv.num_free_blocks == engine.kv.num_blocks
    assert all(engine.kv.ref_count(b) == 0 for b in range(engine.kv.num_blocks))
    assert engine.scheduler.num_preemptions + engine.scheduler.num_timeslice_yields > 0
