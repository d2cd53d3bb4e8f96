"""Steady decode steps planned without visiting every running request.

Once a step schedules every running request for exactly one token (all decode, nothing
admitted or preempted, and nothing the scheduler could admit: no request waits, or under
fcfs the batch is full), the steps after it are the same rows in the same order, each
start one further, until something changes: a request could be admitted, a row needs
more KV blocks, or a row reaches the step where its last token is in flight (the full
loop skips such a row). The first is seen by the scheduler's check per step. The last two
are known in advance per row, so they are kept by the step at which each falls due
(``_alloc_due``, ``_length_due``). A request that finishes or is aborted leaves the plan
(``drop``): the full loop's order of the others, sorted by policy, is the plan's without
it.

A step that falls due for KV blocks makes only those rows' KV calls (each row's every
block_size steps, two with prefix caching); one that cannot allocate hands the step back
to the full loop, which preempts. A row whose last token is in flight is left out of the
step, as the full loop leaves it out, and finishes when that token lands; without async
scheduling nothing is in flight, and a due row still running hands the step back. The
rows' dues are worked out at the first steady step after a full one (a pass over the
rows), not at the full step itself: when plans end every step or two, nothing is paid
for them.
"""
from __future__ import annotations

from kubellm.runtime.core.request import Status

FINISHED = Status.FINISHED
_ADD_ONE = (1).__add__


class SteadyDecode:
    """The rows of the last full step that scheduled every running request for one token,
    and when each of them next needs the full loop."""
    __slots__ = ("requests", "starts", "step", "_alloc_due", "_length_due", "_leaving",
                 "_rows_changed")

    def __init__(self, requests: list, starts: list[int]):
        self.requests = requests          # the rows, in the step's order
        self.starts = starts              # their starts in the last step planned
        self.step = 0                     # steady steps planned since the full one
        # step -> [(position in the step, request)] of the rows needing blocks then, and
        # of the rows that may reach their last token then
        self._alloc_due: dict[int, list] | None = None
        self._length_due: dict[int, list] = {}
        # rows left out of the last step planned: their last token was in flight, and
        # they finish when it lands (the full loop leaves such a row out too)
        self._leaving: set = set()
        # rows dropped or left out since the last step planned: its block tables, row for
        # row, are not this step's
        self._rows_changed = False

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
        """Per row, the steady step at which it needs blocks, and the one at which it may
        reach its last token (both counted from the full step: step k's row for a request
        with start s there ends at s + 1 + k)."""
        alloc_due: dict[int, list] = {}
        length_due: dict[int, list] = {}
        for position, (request, start) in enumerate(zip(self.requests, self.starts)):
            # end s + 1 + k exceeds the tokens its blocks cover from k = noop - s on; at
            # once when its last block waits to be hashed (noop < end: kv_cache.allocate)
            _add(alloc_due, max(1, request.num_kv_noop_tokens - start), position, request)
            # tokens launched when step k is planned: those at the full step, plus k; the
            # full loop skips a pending row whose launched tokens reached max_tokens. Now
            # (planning step 1) they are the full step's plus one
            _add(length_due, max(1, request.max_tokens - len(request.output_token_ids)
                                 - request.num_pending_tokens + 1), position, request)
        self._alloc_due, self._length_due = alloc_due, length_due

    def drop(self, request) -> bool:
        """Take a finished (or aborted) request's row out; False when it has none (the
        plan no longer matches the running list: drop the plan). Its due entries stay,
        and are skipped."""
        if request in self._leaving:
            self._leaving.discard(request)
            return True
        for position, row in enumerate(self.requests):
            if row is request:
                break
        else:
            return False
        if len(self.requests) == 1:
            return False   # none left: nothing to plan
        # new lists: the old ones may be a launched step's output (requests and starts)
        self.requests = self.requests[:position] + self.requests[position + 1:]
        self.starts = self.starts[:position] + self.starts[position + 1:]
        self._rows_changed = True
        return True

    def next_step(self, kv, running: list, can_admit: bool):
        """(requests, starts, same_rows, same_tables) of the next steady step, or None:
        the full loop must plan it (and, after it, this plan is dropped). Allocates the
        rows that fall due. ``same_rows``: the step's rows are the step before's (none
        left); ``same_tables``: and none got a block, so their block tables are the step
        before's, unchanged."""
        # a row left out of the last step that did not finish when its last token landed
        # is the full loop's to judge
        if can_admit or self._leaving or len(running) != len(self.requests):
            return None
        if self._alloc_due is None:
            self._work_out_dues()
        step = self.step + 1
        ending = self._length_due.pop(step, None)
        if ending and not self._leave_out(ending):
            return None
        rows = self._alloc_due.pop(step, None)
        grew = False
        if rows:
            allocate, noop_tokens = kv.allocate, kv.num_noop_tokens
            # in the step's order, as the full loop allocates: the same blocks to the same
            # rows, and the same row is the first one the pool cannot serve
            rows.sort()
            leaving = self._leaving
            for position, request in rows:
                if request.status is FINISHED or request in leaving:
                    continue   # left the plan
                end = request.num_computed_tokens + 1
                new = allocate(request.request_id, request.all_token_ids, end)
                if new is None:
                    return None   # the full loop preempts (and drops this plan)
                grew = grew or bool(new)
                request.num_kv_noop_tokens = noop = noop_tokens(request.request_id)
                _add(self._alloc_due, max(step + 1, step + noop - end + 1), position,
                     request)
        self.step = step
        self.starts = list(map(_ADD_ONE, self.starts))
        same_rows = not self._rows_changed
        self._rows_changed = False
        return list(self.requests), self.starts, same_rows, same_rows and not grew

    def _leave_out(self, ending: list) -> bool:
        """Leave out of this step the rows due to reach their last token, as the full loop
        does: those whose last token is in flight (they finish when it lands). False when
        a due row still running is not at that point (without async scheduling nothing
        is in flight): the full loop must plan the step."""
        leaving = set()
        for _, request in ending:
            if request.status is FINISHED:
                continue
            pending = request.num_pending_tokens
            if not pending or len(request.output_token_ids) + pending < request.max_tokens:
                return False
            leaving.add(request)
        if leaving:
            if len(leaving) == len(self.requests):
                return False   # no row left to plan
            kept = [i for i, request in enumerate(self.requests) if request not in leaving]
            self.requests = list(map(self.requests.__getitem__, kept))
            self.starts = list(map(self.starts.__getitem__, kept))
            self._leaving = leaving
            self._rows_changed = True
        return True


def _add(due: dict[int, list], step: int, position: int, request) -> None:
    rows = due.get(step)
    if rows is None:
        due[step] = [(position, request)]
    else:
        rows.append((position, request))
