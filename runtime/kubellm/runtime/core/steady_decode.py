"""Steady decode steps planned without visiting every running request.

Once a step schedules every running request for exactly one token (all decode, nothing
admitted or preempted, and nothing the scheduler could admit: no request waits, or under
fcfs the batch is full), the steps after it are the same rows in the same order, each
start one further, until something changes: a request finishes or is aborted (the running
list shrinks; it only grows inside the scheduler's own loop), a request could be admitted,
a row needs more KV blocks, or a row reaches the step where its last token is in flight
(the full loop skips such a row). The first two are seen by the scheduler's checks per
step. The last two are known in advance per row, so they are kept by the step at which
each falls due (``_alloc_due``, ``_length_due``).

A step that falls due for KV blocks makes only those rows' KV calls (each row's every
block_size steps, two with prefix caching). One that cannot allocate, or reaches a row's
last token, hands the step back to the full loop, which preempts or skips as it always
does. The rows' dues are
worked out at the first steady step after a full one (a pass over the rows), not at the
full step itself: when a request finishes every step or two, nothing is paid for them.
"""
from __future__ import annotations

_ADD_ONE = (1).__add__


class SteadyDecode:
    """The rows of the last full step that scheduled every running request for one token,
    and when each of them next needs the full loop."""
    __slots__ = ("requests", "starts", "step", "_alloc_due", "_length_due")

    def __init__(self, requests: list, starts: list[int]):
        self.requests = requests          # the rows, in the step's order
        self.starts = starts              # their starts in the last step planned
        self.step = 0                     # steady steps planned since the full one
        # step -> (position in the step, request) of the rows needing blocks then
        self._alloc_due: dict[int, list] | None = None
        self._length_due = 0              # the first step at which a row may be skipped

    @classmethod
    def after(cls, out, running: list, can_admit: bool) -> SteadyDecode | None:
        """The plan that continues ``out`` (a full step's SchedulerOutput), or None when
        ``out`` is not a steady decode step of every running request, or the scheduler
        could admit a waiting one next step."""
        n = len(out.requests)
        if not n or out.preempted or can_admit or n != len(running) \
                or sum(out.num_new_tokens) != n or not all(out.samples):
            return None
        return cls(out.requests, out.starts)

    def _work_out_dues(self) -> None:
        """Per row, the steady step at which it needs blocks, and the first at which one
        may reach its last token (both counted from the full step: step k's row for a
        request with start s there ends at s + 1 + k)."""
        alloc_due: dict[int, list] = {}
        length_due = None
        for position, (request, start) in enumerate(zip(self.requests, self.starts)):
            # end s + 1 + k exceeds the tokens its blocks cover from k = noop - s on; at
            # once when its last block waits to be hashed (noop < end: kv_cache.allocate)
            due = max(1, request.num_kv_noop_tokens - start)
            rows = alloc_due.get(due)
            if rows is None:
                alloc_due[due] = [(position, request)]
            else:
                rows.append((position, request))
            # tokens launched when step k is planned: those at the full step, plus k; the
            # full loop skips a pending row whose launched tokens reached max_tokens. Now
            # (planning step 1) they are the full step's plus one
            due = request.max_tokens - len(request.output_token_ids) - \
                request.num_pending_tokens + 1
            if length_due is None or due < length_due:
                length_due = due
        self._alloc_due, self._length_due = alloc_due, length_due

    def next_step(self, kv, running: list, can_admit: bool):
        """(requests, starts) of the next steady step, or None: the full loop must plan
        it (and, after it, this plan is dropped). Allocates the rows that fall due."""
        requests = self.requests
        if can_admit or len(running) != len(requests):
            return None
        if self._alloc_due is None:
            self._work_out_dues()
        step = self.step + 1
        if step >= self._length_due:
            return None
        rows = self._alloc_due.pop(step, None)
        if rows:
            allocate, noop_tokens = kv.allocate, kv.num_noop_tokens
            # in the step's order, as the full loop allocates: the same blocks to the same
            # rows, and the same row is the first one the pool cannot serve
            rows.sort()
            for position, request in rows:
                end = request.num_computed_tokens + 1
                if allocate(request.request_id, request.all_token_ids, end) is None:
                    return None   # the full loop preempts (and drops this plan)
                request.num_kv_noop_tokens = noop = noop_tokens(request.request_id)
                due = max(step + 1, step + noop - end + 1)
                later = self._alloc_due.get(due)
                if later is None:
                    self._alloc_due[due] = [(position, request)]
                else:
                    later.append((position, request))
        self.step = step
        self.starts = list(map(_ADD_ONE, self.starts))
        return list(requests), self.starts
