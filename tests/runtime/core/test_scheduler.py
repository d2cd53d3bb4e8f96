"""Scheduler behaviour with hand-built model outputs (no model, no tensors)."""
from __future__ import annotations

from kubellm.runtime.core.kv_cache import KVCacheManager
from kubellm.runtime.core.request import Request
from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.core.scheduler import Scheduler


def make(num_blocks=64, block_size=4, budget=32, max_seqs=8, policy="fcfs", slice_steps=4):
    kv = KVCacheManager(num_blocks, block_size)
    return Scheduler(kv, budget, max_seqs, policy, slice_steps)


def req(rid, prompt_len, max_tokens=4, priority=0, t=0.0):
    r = Request(rid, list(range(1000 + hash(rid) % 1000, 1000 + hash(rid) % 1000 + prompt_len)),
                SamplingParams(max_tokens=max_tokens), priority=priority, arrival_time=t)
    r.max_tokens = max_tokens
    return r


def step(s: Scheduler):
    """One step with a fake model: every sampling request gets token 7; requests that
    reach max_tokens finish. Returns the SchedulerOutput."""
    out = s.schedule()
    sampled = {x.request.request_id: 7 for x in out.scheduled if x.samples}
    for r in s.update(out, sampled):
        if r.num_output_tokens >= r.max_tokens:
            s.finish_request(r, "length")
    return out


def run_all(s, limit=500):
    outs = []
    while s.has_unfinished() and len(outs) < limit:
        outs.append(step(s))
    assert not s.has_unfinished(), "scheduler did not drain"
    return outs


def test_token_budget_respected_every_step_and_decodes_go_first():
    s = make(budget=16)
    for i in range(6):
        s.add_request(req(f"r{i}", 3 + 7 * i, max_tokens=5, t=i))
    for out in run_all(s):
        assert out.num_batched_tokens <= 16
        kinds = [x.num_new_tokens == 1 and x.start > 0 for x in out.scheduled]
        # all decodes (True) come before any prefill chunk (False)
        assert kinds == sorted(kinds, reverse=True)
    assert s.kv.num_free_blocks == s.kv.num_blocks


def test_long_prompt_is_chunked_and_samples_only_at_its_end():
    s = make(budget=8, num_blocks=64)
    s.add_request(req("long", 30, max_tokens=2))
    chunks = []
    while s.has_unfinished():
        out = step(s)
        x = out.scheduled[0]
        chunks.append((x.num_new_tokens, x.samples))
    assert chunks[:4] == [(8, False), (8, False), (8, False), (6, True)]
    assert chunks[4] == (1, True)


def test_priority_admits_higher_priority_first():
    s = make(max_seqs=1, policy="priority")
    for rid, prio, t in [("low", 0, 0.0), ("high", 5, 1.0), ("mid", 1, 2.0)]:
        s.add_request(req(rid, 4, max_tokens=2, priority=prio, t=t))
    order = []
    while s.has_unfinished():
        out = step(s)
        for x in out.scheduled:
            if x.start == 0:
                order.append(x.request.request_id)
    assert order == ["high", "mid", "low"]


def test_priority_preempts_the_lowest_priority_when_blocks_run_out():
    # 6 blocks of 4 tokens; three requests of 8 prompt tokens growing by decode
    s = make(num_blocks=6, block_size=4, policy="priority")
    s.add_request(req("p0", 8, max_tokens=12, priority=0, t=0))
    s.add_request(req("p2", 8, max_tokens=12, priority=2, t=1))
    s.add_request(req("p1", 8, max_tokens=12, priority=1, t=2))
    preempted = []
    for out in run_all(s):
        preempted += [r.request_id for r in out.preempted]
    assert preempted, "the pool was sized to force preemption"
    assert "p2" not in preempted
    assert preempted[0] == "p0"


def test_waiting_high_priority_preempts_running_low_priority():
    s = make(max_seqs=1, policy="priority")
    s.add_request(req("low", 4, max_tokens=50, priority=0))
    step(s)
    step(s)
    s.add_request(req("urgent", 4, max_tokens=2, priority=9, t=1.0))
    out = step(s)
    assert [r.request_id for r in out.preempted] == ["low"]
    assert [x.request.request_id for x in out.scheduled] == ["urgent"]
    run_all(s)


def test_fcfs_preempts_the_newest_and_it_finishes_later():
    s = make(num_blocks=5, block_size=4)
    for i in range(3):
        s.add_request(req(f"r{i}", 4, max_tokens=8, t=i))
    victims = []
    finished_tokens = {}
    while s.has_unfinished():
        out = s.schedule()
        victims += [r.request_id for r in out.preempted]
        sampled = {x.request.request_id: 7 for x in out.scheduled if x.samples}
        for r in s.update(out, sampled):
            if r.num_output_tokens >= r.max_tokens:
                finished_tokens[r.request_id] = r.num_output_tokens
                s.finish_request(r, "length")
    assert victims and victims[0] == "r2"
    assert finished_tokens == {"r0": 8, "r1": 8, "r2": 8}


def _steps_until_first_token(policy: str) -> int:
    s = make(max_seqs=1, policy=policy, slice_steps=4, num_blocks=256)
    s.add_request(req("long", 4, max_tokens=200, t=0.0))
    step(s)
    s.add_request(req("short", 4, max_tokens=2, t=1.0))
    for n in range(1, 400):
        step(s)
        short = [r for r in s.running if r.request_id == "short"]
        if short and short[0].num_output_tokens >= 1 or not s.has_unfinished():
            return n
    return 400


def test_timeslice_bounds_the_wait_of_a_short_request():
    # fcfs: the short request waits for the whole long generation
    assert _steps_until_first_token("fcfs") > 150
    # timeslice: the long request yields its only slot after 4 steps
    assert _steps_until_first_token("timeslice") <= 4 + 2


def test_timeslice_fairness_bound_with_many_requests():
    s = make(max_seqs=2, policy="timeslice", slice_steps=3, num_blocks=256)
    for i in range(6):
        s.add_request(req(f"r{i}", 4, max_tokens=30, t=i))
    waited = {f"r{i}": 0 for i in range(6)}
    longest = {f"r{i}": 0 for i in range(6)}
    while s.has_unfinished():
        out = step(s)
        ran = {x.request.request_id for x in out.scheduled}
        for rid in waited:
            if rid in ran:
                waited[rid] = 0
            elif s.get(rid) is not None:
                waited[rid] += 1
                longest[rid] = max(longest[rid], waited[rid])
    # with 6 requests, 2 slots and slices of 3 steps (+1 re-prefill step), nobody waits
    # more than (6/2 - 1) rounds of 4 steps plus slack
    assert max(longest.values()) <= 3 * 4 + 2


def test_a_row_taken_out_for_a_higher_priority_request_leaves_the_rows_aligned():
    """SchedulerOutput keeps its rows as parallel lists: a victim preempted after the
    decodes were placed loses its row in every list, and the others keep theirs."""
    s = make(budget=64, max_seqs=2, policy="priority")
    for i, (rid, length) in enumerate([("low", 5), ("mid", 5), ("high", 6)]):
        # prompts of their own (req's are seeded by hash(): no prefix hit by chance)
        r = Request(rid, list(range(100 * i, 100 * i + length)),
                    SamplingParams(max_tokens=8), priority=i, arrival_time=float(i))
        r.max_tokens = 8
        s.add_request(r)
        if rid == "mid":
            step(s)                           # low and mid prefill and sample
    out = s.schedule()
    assert [r.request_id for r in out.requests] == ["mid", "high"]
    assert [r.request_id for r in out.preempted] == ["low"]
    assert len(out.num_new_tokens) == len(out.starts) == len(out.samples) == 2
    mid, high = out.scheduled
    assert (mid.num_new_tokens, mid.start, mid.samples) == (1, 5, True)
    assert (high.num_new_tokens, high.start, high.samples) == (6, 0, True)
    assert out.num_batched_tokens == 7
