"""Steady decode steps (core/steady_decode.py) plan exactly what the full loop plans.

Two schedulers, the steady plan on and off, are driven through the same random runs with
a fake model (a token is a function of the request and its length): arrivals, aborts,
stop tokens, varied max_tokens, a KV pool small enough to preempt, prefix caching over
shared prompts, the three policies, with the engine's async order (plan step N+1, launch
it, then land step N) and without. Every step's rows, starts, token counts, sampling
flags and preemptions, and every request's block table and the pool after it, must be
equal; and the steady path must have planned most decode steps, so the comparison is
not between two full loops."""
from __future__ import annotations

import random
import zlib

import pytest

from kubellm.runtime.core.kv_cache import KVCacheManager
from kubellm.runtime.core.request import Request, Status
from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.core.scheduler import Scheduler
from kubellm.runtime.core.steady_decode import SteadyDecode

STOP_TOKEN = 5


def fake_token(request: Request) -> int:
    """The same for both runs: a function of the request and how long it is (crc32: the
    same in every process, unlike hash() of a str)."""
    key = f"{request.request_id}:{len(request.all_token_ids)}".encode()
    return 3 + zlib.crc32(key) % 97


class Run:
    """One scheduler and its requests, driven as the engine drives it."""

    def __init__(self, steady: bool, policy: str, num_blocks: int, prefix_caching: bool,
                 async_scheduling: bool, max_seqs: int):
        kv = KVCacheManager(num_blocks, 4, enable_prefix_caching=prefix_caching)
        self.s = Scheduler(kv, 48, max_seqs, policy, timeslice_steps=6)
        self.s.steady_decode = steady
        self.async_scheduling = async_scheduling
        self.in_flight = None
        self.requests: dict[str, Request] = {}
        self.steady_steps = 0
        self.shrunk_steps = 0   # steady steps with fewer rows than the step before
        self.last_tables = []         # the step before's rows and their block tables
        self.same_tables_steps = self.same_rows_steps = 0
        self.handed_out: dict[int, tuple] = {}   # id(out) -> its rows when planned

    def add(self, rid: str, prompt: list[int], max_tokens: int, priority: int, t: float):
        request = Request(rid, list(prompt), SamplingParams(max_tokens=max_tokens),
                          priority=priority, arrival_time=t)
        request.max_tokens = max_tokens
        self.requests[rid] = request
        self.s.add_request(request)

    def abort(self, rid: str) -> None:
        self.s.finish_request(self.requests[rid], "abort")

    def _land(self, out) -> None:
        # a plan handed out is never changed afterwards (the model runner's step handle
        # keeps its lists: a row taken out of them would misplace every sample after it)
        assert (list(out.requests), list(out.starts)) == self.handed_out.pop(id(out))
        sampled = {r.request_id: fake_token(r)
                   for r, samples in zip(out.requests, out.samples) if samples}
        for request in self.s.on_result(out, sampled):
            if request.output_token_ids[-1] == STOP_TOKEN or \
                    len(request.output_token_ids) >= request.max_tokens:
                self.s.finish_request(request, "stop")

    def step(self) -> tuple:
        plan = self.s._steady
        before = plan.step if plan is not None else None
        out = self.s.schedule()
        if plan is not None and self.s._steady is plan and plan.step == before + 1:
            self.steady_steps += 1
            self.shrunk_steps += len(out.requests) < len(self.last_tables)
        # same_rows promises the step before's rows, same_tables their tables too
        tables_now = [(r.request_id, tuple(self.s.kv.block_table(r.request_id)))
                      for r in out.requests]
        if out.same_rows:
            assert [rid for rid, _ in tables_now] == [rid for rid, _ in self.last_tables]
            self.same_rows_steps += 1
        if out.same_tables:
            assert out.same_rows and tables_now == self.last_tables
            self.same_tables_steps += 1
        self.last_tables = tables_now
        self.handed_out[id(out)] = (list(out.requests), list(out.starts))
        row = (tuple((r.request_id, start, n, samples) for r, start, n, samples in zip(
            out.requests, out.starts, out.num_new_tokens, out.samples)),
            tuple(r.request_id for r in out.preempted))
        if not self.async_scheduling:
            if out.requests:
                self.s.on_launch(out)
                self._land(out)
        else:
            launched = None
            if out.requests:
                self.s.on_launch(out)
                launched = out
            if self.in_flight is not None:
                self._land(self.in_flight)
            self.in_flight = launched
        kv = self.s.kv
        tables = tuple(sorted((rid, tuple(kv._tables.get(rid, ())))
                              for rid in self.requests))
        return row, tables, kv.num_free_blocks

    def busy(self) -> bool:
        return self.s.has_unfinished() or self.in_flight is not None


def drive(seed: int, policy: str, num_blocks: int, prefix_caching: bool,
          async_scheduling: bool, max_seqs: int = 12) -> tuple[Run, Run]:
    runs = [Run(steady, policy, num_blocks, prefix_caching, async_scheduling, max_seqs)
            for steady in (True, False)]
    rng = random.Random(seed)
    shared = [rng.randrange(10, 99) for _ in range(12)]   # a common prefix, for the cache
    arrivals = 0
    for step in range(1500):
        if arrivals < 40 and (step < 3 or rng.random() < 0.08):
            for _ in range(rng.choice((1, 1, 2, 5))):
                rid = f"r{arrivals}"
                prompt = (shared[:rng.choice((0, 4, 8, 12))] +
                          [rng.randrange(10, 99) for _ in range(rng.randrange(1, 30))])
                max_tokens = rng.choice((1, 2, 7, 20, 40, 90))
                priority = rng.randrange(3)
                for run in runs:
                    run.add(rid, prompt, max_tokens, priority, float(arrivals))
                arrivals += 1
        alive = sorted(rid for rid, r in runs[0].requests.items()
                       if r.status is not Status.FINISHED)
        if alive and rng.random() < 0.03:
            victim = rng.choice(alive)
            for run in runs:
                run.abort(victim)
        if not any(run.busy() for run in runs) and arrivals >= 40:
            break
        steady, full = (run.step() for run in runs)
        assert steady == full, f"step {step}: the steady plan differs from the full loop"
    assert not any(run.busy() for run in runs), "the runs did not drain"
    return runs[0], runs[1]


@pytest.mark.parametrize("async_scheduling", [True, False])
@pytest.mark.parametrize("policy", ["fcfs", "priority", "timeslice"])
@pytest.mark.parametrize("prefix_caching", [True, False])
def test_steady_steps_plan_what_the_full_loop_plans(async_scheduling, policy, prefix_caching):
    shrunk = same_tables = same_rows = 0
    for seed in range(10):
        # 60 blocks of 4 tokens: preemptions; 400: none; a batch of 4: full, with a queue
        for num_blocks, max_seqs in ((60, 12), (400, 12), (400, 4)):
            steady, full = drive(seed, policy, num_blocks, prefix_caching, async_scheduling,
                                 max_seqs)
            assert full.steady_steps == 0
            assert steady.s.num_preemptions == full.s.num_preemptions
            shrunk += steady.shrunk_steps
            same_tables += steady.same_tables_steps
            same_rows += steady.same_rows_steps
    # the steady path planned a good part of the steps (else this compares nothing),
    # and went on after requests had left its rows
    assert steady.steady_steps > 50, steady.steady_steps
    assert shrunk > 20, shrunk
    assert same_rows > same_tables > 100, (same_rows, same_tables)


def test_a_pool_too_small_for_the_next_block_hands_the_step_to_the_full_loop():
    """Two requests decoding, the pool empty: the first due allocation fails, the full
    loop preempts the newer request, and the older one goes on."""
    kv = KVCacheManager(4, 4, enable_prefix_caching=False)
    s = Scheduler(kv, 48, 8)
    for i in range(2):
        r = Request(f"r{i}", [10 + i] * 3, SamplingParams(max_tokens=50), arrival_time=i)
        r.max_tokens = 50
        s.add_request(r)
    preempted, plan = [], None
    for _ in range(12):
        plan = s._steady
        out = s.schedule()
        preempted += [r.request_id for r in out.preempted]
        s.update(out, {r.request_id: 7 for r in out.requests})
        if preempted:
            break
    assert preempted == ["r1"]
    # the step was the steady plan's until its allocation failed
    assert plan is not None and plan.step >= 1 and s._steady is not plan
    assert [r.request_id for r in s.running] == ["r0"]


def test_no_plan_after_a_step_that_left_a_request_out_or_admitted_a_prompt():
    kv = KVCacheManager(64, 4, enable_prefix_caching=False)
    s = Scheduler(kv, 48, 8)
    r = Request("a", [1, 2, 3], SamplingParams(max_tokens=9), arrival_time=0)
    r.max_tokens = 9
    s.add_request(r)
    out = s.schedule()          # a prefill of 3: not a steady step
    assert s._steady is None
    s.update(out, {"a": 7})
    out = s.schedule()          # one decode, nothing waiting: steady from here
    assert isinstance(s._steady, SteadyDecode)
    s.update(out, {"a": 7})
    s.add_request(Request("b", [4], SamplingParams(max_tokens=2), arrival_time=1))
    assert s._can_admit()
    assert s._steady.next_step(kv, s.running, s._can_admit()) is None   # someone waits


def test_rows_due_together_get_their_blocks_in_the_step_order():
    """Rows falling due in one step allocate in the step's order, whatever order their
    due list holds them in: the same block ids as the full loop hands out."""
    schedulers = []
    for steady in (True, False):
        s = Scheduler(KVCacheManager(16, 4, enable_prefix_caching=False), 48, 8)
        s.steady_decode = steady
        for i in range(3):
            r = Request(f"r{i}", [10 + i] * 3, SamplingParams(max_tokens=30), arrival_time=i)
            r.max_tokens = 30
            s.add_request(r)
        for _ in range(2):      # the prefills (3 tokens, one block each), then a decode
            s.update(s.schedule(), {f"r{i}": 7 for i in range(3)})
        schedulers.append(s)
    plan = schedulers[0]._steady
    plan._work_out_dues()
    due = plan._alloc_due[1]            # all three cross into a second block next step
    assert [position for position, _ in due] == [0, 1, 2]
    due.reverse()
    for s in schedulers:
        s.update(s.schedule(), {f"r{i}": 7 for i in range(3)})
    assert plan.step == 1               # the steady path planned it
    tables = [{f"r{i}": list(s.kv._tables[f"r{i}"]) for i in range(3)} for s in schedulers]
    assert tables[0] == tables[1]


def test_fcfs_plans_steady_steps_while_the_batch_is_full_and_requests_wait():
    s = Scheduler(KVCacheManager(64, 4, enable_prefix_caching=False), 48, 2)
    for i in range(3):
        r = Request(f"r{i}", [10 + i] * 3, SamplingParams(max_tokens=20), arrival_time=i)
        r.max_tokens = 20
        s.add_request(r)
    plans = []
    for _ in range(6):
        s.update(s.schedule(), {f"r{i}": 7 for i in range(3)})
        plans.append(s._steady.step if s._steady is not None else None)
    assert len(s.running) == 2 and len(s.waiting) == 1 and not s._can_admit()
    assert plans[-3:] == [2, 3, 4], plans   # one full step after the prefill, then the plan


def test_a_row_at_its_last_token_leaves_and_the_plan_goes_on():
    """Async order: r0's last token is in flight, so the step leaves it out (as the full
    loop does); it finishes when that token lands, and the same plan goes on with r1."""
    s = Scheduler(KVCacheManager(64, 4, enable_prefix_caching=False), 48, 8)
    for i, max_tokens in enumerate((6, 30)):
        r = Request(f"r{i}", [10 + i] * 3, SamplingParams(max_tokens=max_tokens),
                    arrival_time=i)
        r.max_tokens = max_tokens
        s.add_request(r)
    in_flight, steps = None, []
    for _ in range(14):
        out = s.schedule()
        s.on_launch(out)
        if in_flight is not None:
            for r in s.on_result(in_flight, {r.request_id: 7 for r in in_flight.requests}):
                if len(r.output_token_ids) >= r.max_tokens:
                    s.finish_request(r, "length")
        in_flight = out
        steps.append((s._steady, tuple(r.request_id for r in out.requests)))
    both = [plan for plan, rows in steps if rows == ("r0", "r1") and plan is not None]
    alone = [plan for plan, rows in steps if rows == ("r1",)]
    assert both and len(alone) >= 5
    # one plan from r0 and r1's decode to the end: none of these steps ran the full loop
    assert all(plan is both[-1] for plan in alone), steps
    assert s._steady.step >= 8
