"""Continuous-batching scheduler: token counts and block ids, never tensors.

Each step spends one token budget (``max_num_batched_tokens``): running requests first
(decodes before unfinished chunked prefills), then waiting requests in policy order,
their prompts chunked to fit. When the KV pool runs dry, a running request is preempted
by recompute (its blocks freed; it re-enters the waiting queue and later re-prefills its
prompt plus what it already generated, so it finishes with the same tokens).

Steady decode (every running request one token a step, none to admit) is planned from
the step before, without the per-request loop, until something changes
(``steady_decode.py``); it plans exactly what the loop would.

Policies
- ``fcfs``: arrival order; the newest running request is preempted first.
- ``priority``: higher ``priority`` admitted first and preempted last (ties: arrival);
  a waiting request may preempt running ones of strictly lower priority.
- ``timeslice``: fcfs, but a request that has run ``timeslice_steps`` steps while others
  wait yields its slot and goes to the back of the queue (its full blocks stay in the
  prefix cache, so resuming is cheap).
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from operator import attrgetter

from kubellm.runtime.core.histogram import CumulativeHistogram
from kubellm.runtime.core.kv_cache import KVCacheManager
from kubellm.runtime.core.request import Request, Status
from kubellm.runtime.core.steady_decode import SteadyDecode


_BY_ARRIVAL = attrgetter("arrival_time")
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class ScheduledRequest:
    """One request's part of a step: ``num_new_tokens`` tokens from position ``start``;
    ``samples`` when the chunk reaches the last known token (sample after it)."""
    __slots__ = ("request", "num_new_tokens", "start", "samples")

    def __init__(self, request: Request, num_new_tokens: int, start: int,
                 samples: bool | None = None):
        self.request = request
        self.num_new_tokens = num_new_tokens
        self.start = start
        self.samples = start + num_new_tokens == request.num_scheduled_tokens \
            if samples is None else samples   # the scheduler's hot loop knows it already

    def __repr__(self) -> str:
        return (f"ScheduledRequest({self.request.request_id!r}, {self.num_new_tokens}, "
                f"{self.start}, samples={self.samples})")


class SchedulerOutput:
    """A step's plan: per scheduled request, in the step's order, four parallel lists
    (the scheduler's hot loop appends to them rather than build an object per row):
    ``requests``, ``num_new_tokens``, ``starts`` (the chunk's first position) and
    ``samples``. ``scheduled`` gives the same rows as ScheduledRequest objects, built on
    each read (a tuple: changing it would change nothing), for the paths that are not
    hot; assigning it replaces the rows."""
    __slots__ = ("has_special", "is_steady", "num_new_tokens", "preempted", "requests",
                 "same_rows", "same_tables", "samples", "starts")

    def __init__(self, scheduled: Iterable[ScheduledRequest] = (),
                 preempted: list[Request] | None = None, has_special: bool = True):
        self.scheduled = scheduled
        self.preempted = [] if preempted is None else preempted
        # False when no request alive asks for per-request logits work (constraints,
        # prompt logprobs): the model runner and sampler then skip looking for it
        self.has_special = has_special
        # planned by the steady decode plan: every row one token, every row samples
        self.is_steady = False
        # the rows are the step before's, row for row (the steady plan knows: none left),
        # so the engine hands the model runner the same list of block tables again (the
        # KV manager grows each table in place); same_tables: and none grew
        self.same_rows = self.same_tables = False

    @property
    def scheduled(self) -> tuple[ScheduledRequest, ...]:
        return tuple(map(ScheduledRequest, self.requests, self.num_new_tokens, self.starts,
                        self.samples))

    @scheduled.setter
    def scheduled(self, entries: Iterable[ScheduledRequest]) -> None:
        entries = list(entries)
        self.is_steady = self.same_rows = self.same_tables = False
        self.requests = [s.request for s in entries]
        self.num_new_tokens = [s.num_new_tokens for s in entries]
        self.starts = [s.start for s in entries]
        self.samples = [s.samples for s in entries]

    def add(self, request: Request, num_new_tokens: int, start: int, samples: bool) -> None:
        self.requests.append(request)
        self.num_new_tokens.append(num_new_tokens)
        self.starts.append(start)
        self.samples.append(samples)

    def remove(self, request: Request) -> int:
        """Take ``request``'s row out; returns its number of new tokens."""
        i = next(i for i, r in enumerate(self.requests) if r is request)
        self.same_rows = self.same_tables = False
        num_new = self.num_new_tokens[i]
        for column in (self.requests, self.num_new_tokens, self.starts, self.samples):
            del column[i]
        return num_new

    @property
    def num_batched_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def is_empty(self) -> bool:
        return not self.requests


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_batched_tokens: int, max_num_seqs: int,
                 policy: str = "fcfs", timeslice_steps: int = 32):
        self.kv = kv
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.policy = policy
        self.timeslice_steps = timeslice_steps
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.num_preemptions = 0
        self.num_timeslice_yields = 0
        self.num_special = 0          # unfinished requests whose params.is_special
        # unfinished requests whose params.reads_output_tokens: while none, the engine
        # need not look for one that must wait for its landed token
        self.num_reading_outputs = 0
        # tokens per step, vLLM's vllm:iteration_tokens_total
        self.iteration_tokens = CumulativeHistogram(ITERATION_TOKEN_BUCKETS)
        self._requests: dict[str, Request] = {}
        # steady decode steps planned from the last one (steady_decode.py); off: every
        # step runs the full loop (tests compare the two)
        self.steady_decode = True
        self._steady: SteadyDecode | None = None

    # ---- queue management ----------------------------------------------------------
    def add_request(self, request: Request) -> None:
        request.status = Status.WAITING
        self.waiting.append(request)
        self._requests[request.request_id] = request
        if request.params.is_special:
            self.num_special += 1
        if request.params.reads_output_tokens:
            self.num_reading_outputs += 1

    def get(self, request_id: str) -> Request | None:
        return self._requests.get(request_id)

    def finish_request(self, request: Request, reason: str, stop_reason=None) -> None:
        """Take a request out of the queues and give its blocks back (done or aborted)."""
        if request.is_finished:
            return
        if request in self.running:
            self.running.remove(request)
            if self._steady is not None and not self._steady.drop(request):
                self._steady = None
        elif request in self.waiting:
            self.waiting.remove(request)
        self._free(request)
        if request.params.is_special:
            self.num_special -= 1
        if request.params.reads_output_tokens:
            self.num_reading_outputs -= 1
        request.status = Status.FINISHED
        request.finish_reason = reason
        request.stop_reason = stop_reason
        self._requests.pop(request.request_id, None)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- one step ------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(has_special=self.num_special > 0)
        steady = self._steady
        if steady is not None:
            rows = steady.next_step(self.kv, self.running, self._can_admit())
            if rows is not None:     # the last step's rows, each one token further
                out.requests, out.starts, out.same_rows, out.same_tables = rows
                n = len(out.requests)
                out.num_new_tokens, out.samples = [1] * n, [True] * n
                out.is_steady = True
                self.iteration_tokens.observe(n)
                return out
            self._steady = None
        budget = self.max_num_batched_tokens
        if self.policy == "timeslice" and self.waiting:
            self._yield_expired_slices(out)
        # the hot loop of every step (each running request): locals, no properties, no
        # KV call while the request's blocks already cover the step (it fills a block
        # only every block_size tokens), and the allocation's hot path tried before the
        # wrapper that may preempt
        allocate, running = self.kv.allocate, Status.RUNNING
        add_request, add_num_new = out.requests.append, out.num_new_tokens.append
        add_start, add_samples = out.starts.append, out.samples.append
        noop_tokens = self.kv.num_noop_tokens
        for request in self._running_order():
            if budget == 0:
                break
            if request.status is not running:
                continue  # preempted earlier in this loop
            pending = request.num_pending_tokens
            target = len(request.all_token_ids) + pending   # num_scheduled_tokens
            if pending and len(request.output_token_ids) + pending >= request.max_tokens:
                continue  # its late token is its last: it finishes when that lands
            computed = request.num_computed_tokens
            num_new = target - computed
            if num_new > budget:          # min(), without the call
                num_new = budget
            if computed + num_new > request.num_kv_noop_tokens:
                if allocate(request.request_id, request.all_token_ids,
                            computed + num_new) is None \
                        and not self._allocate_or_preempt(request, num_new, out):
                    continue
                request.num_kv_noop_tokens = noop_tokens(request.request_id)
            add_request(request)          # the row (SchedulerOutput.add, inlined: hot)
            add_num_new(num_new)
            add_start(computed)
            add_samples(computed + num_new == target)
            budget -= num_new
        num_running_rows = len(out.requests)
        if not out.preempted:
            budget = self._admit_waiting(out, budget)
        if out.requests:
            self.iteration_tokens.observe(self.max_num_batched_tokens - budget)
        # admitted rows come after the running ones, out of the order the next step's
        # loop gives them (_running_order): a plan starts from a step without any
        if self.steady_decode:
            self._steady = SteadyDecode.after(out, self.running, self._can_admit()) \
                if len(out.requests) == num_running_rows else None
        return out

    def _can_admit(self) -> bool:
        """Whether the next step's loop may admit or yield to a waiting request: never
        while none waits, nor under fcfs while the batch is full (only the priority
        policy preempts for a waiting request, only timeslice yields to one)."""
        return bool(self.waiting) and (self.policy != "fcfs"
                                       or len(self.running) < self.max_num_seqs)

    def update(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Both halves at once, for an engine that waits for every step."""
        self.on_launch(out)
        return self.on_result(out, sampled)

    def on_launch(self, out: SchedulerOutput) -> None:
        """The step is queued on the device: count its tokens as computed and its samples
        as pending, so that the next step can be planned before they come back."""
        if out.is_steady:   # the same, knowing each row is one token that samples
            for request, start in zip(out.requests, out.starts):
                request.num_computed_tokens = start + 1
                request.num_pending_tokens += 1
            if self.policy == "timeslice":   # the only reader of steps_in_slice
                for request in out.requests:
                    request.steps_in_slice += 1
            return
        for request, start, num_new, samples in zip(out.requests, out.starts,
                                                    out.num_new_tokens, out.samples):
            request.num_computed_tokens = start + num_new
            request.steps_in_slice += 1
            if samples:
                request.num_pending_tokens += 1

    def on_result(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """The step's samples are on the host: append them. Returns the requests that
        received a token (the engine checks them for stop conditions). A request that
        finished meanwhile (stopped by the step before, or aborted) drops its token."""
        progressed = []
        finished, get = Status.FINISHED, sampled.get
        for request in out.requests:
            token = get(request.request_id)
            if token is None or request.status is finished:
                continue
            request.num_pending_tokens -= 1
            request.output_token_ids.append(token)   # Request.append_token, inlined (hot)
            request.all_token_ids.append(token)
            progressed.append(request)
        return progressed

    # ---- helpers -------------------------------------------------------------------
    def _running_order(self) -> list[Request]:
        # decodes before partial prefills; within each, the policy's order
        if self.policy == "priority":
            return sorted(self.running, key=lambda r: (
                r.num_scheduled_tokens - r.num_computed_tokens > 1, -r.priority,
                r.arrival_time))
        ordered = sorted(self.running, key=_BY_ARRIVAL)   # C-level key: no Python call each
        partial = [r for r in ordered if len(r.all_token_ids) + r.num_pending_tokens
                   - r.num_computed_tokens > 1]
        if not partial:
            return ordered
        return [r for r in ordered if len(r.all_token_ids) + r.num_pending_tokens
                - r.num_computed_tokens <= 1] + partial

    def _rank(self, request: Request):
        """Sort key: smaller runs (and is admitted) earlier and is preempted later."""
        if self.policy == "priority":
            return (-request.priority, request.arrival_time)
        return (request.arrival_time,)

    def _allocate_or_preempt(self, request, num_new, out) -> bool:
        while True:
            if self.kv.allocate(request.request_id, request.all_token_ids,
                                request.num_computed_tokens + num_new) is not None:
                return True
            victim = self._pick_victim(exclude=set(out.requests))
            self._preempt(victim, out)
            if victim is request:
                return False

    def _free(self, request: Request) -> None:
        self.kv.free(request.request_id)
        request.num_kv_noop_tokens = 0   # no blocks: the next step must allocate

    def _pick_victim(self, exclude: Iterable[Request] = ()) -> Request:
        # never a request already placed in this step's batch; ``request`` itself is
        # always a candidate, so this cannot come up empty
        candidates = [r for r in self.running if r not in exclude]
        return max(candidates, key=self._rank)

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        self.running.remove(request)
        self._free(request)
        request.status = Status.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        request.output_metrics = None     # its outputs' metrics change: a new dict
        request.steps_in_slice = 0
        self.num_preemptions += 1
        self.waiting.insert(0, request)   # first back in (fcfs); rank decides otherwise
        out.preempted.append(request)

    def _yield_expired_slices(self, out: SchedulerOutput) -> None:
        expired = [r for r in self.running if r.steps_in_slice >= self.timeslice_steps]
        for request in expired[:len(self.waiting)]:
            self.running.remove(request)
            self._free(request)
            request.status = Status.WAITING
            request.num_computed_tokens = 0
            request.steps_in_slice = 0
            self.num_timeslice_yields += 1
            self.waiting.append(request)  # to the back of the queue

    def _next_waiting(self) -> Request | None:
        # a request preempted while its last token was in flight waits for that token:
        # its prompt for the re-prefill is not complete on the host yet
        ready = (r for r in self.waiting if not r.num_pending_tokens)
        if self.policy == "priority":
            return min(ready, key=self._rank, default=None)
        return next(ready, None)

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> int:
        while budget > 0:
            request = self._next_waiting()
            if request is None:
                break
            if len(self.running) >= self.max_num_seqs:
                freed = self._preempt_for(request, out)
                if freed is None:
                    break
                budget += freed
                continue
            cached = []
            # prompt logprobs need every prompt position computed: no cache hits for them
            if request.num_computed_tokens == 0 and request.params.prompt_logprobs is None:
                cached = self.kv.find_cached_prefix(request.request_id, request.all_token_ids)
            num_computed = len(cached) * self.kv.block_size
            num_new = min(request.num_tokens - num_computed, budget)
            if self.kv.allocate(request.request_id, request.all_token_ids,
                                num_computed + num_new, cached) is None:
                freed = self._preempt_for(request, out)
                if freed is None:
                    break
                budget += freed
                continue
            request.num_kv_noop_tokens = self.kv.num_noop_tokens(request.request_id)
            self.waiting.remove(request)
            if request.first_scheduled_time is None:
                request.first_scheduled_time = time.monotonic()
            request.status = Status.RUNNING
            request.num_computed_tokens = num_computed
            if request.num_preemptions == 0 and request.num_output_tokens == 0:
                request.num_cached_tokens = num_computed
            self.running.append(request)
            out.add(request, num_new, num_computed,
                    num_computed + num_new == request.num_scheduled_tokens)
            budget -= num_new
        return budget

    def _preempt_for(self, request, out) -> int | None:
        """Priority policy: make room for ``request`` by preempting the lowest-ranked
        running request of strictly lower priority, taking it out of this step's batch
        if it was in it. Returns the tokens of budget that gives back, None if no victim."""
        if self.policy != "priority":
            return None
        candidates = [r for r in self.running if r.priority < request.priority]
        if not candidates:
            return None
        victim = max(candidates, key=self._rank)
        freed = 0
        if any(r is victim for r in out.requests):   # in this step's batch already
            freed = out.remove(victim)
        self._preempt(victim, out)
        return freed
