"""A decode step's inputs derived from the step before, without visiting each request.

In steady decode with async scheduling every row of step N+1 continues a row that
sampled in step N (still on the device): its one input token is that sample, its
position is where step N's row ended, its block table is the same list, longer by a
block every block_size tokens. So the model runner keeps, per sampling row of the last
step, where it ended and which table row it used; the next step's positions, sequence
lengths, slots and block table follow from those arrays with a few numpy operations,
whatever requests joined earlier or left since (a left row is just not selected).

A step qualifies when it is decode-only and each of its requests sampled in the step it
runs ahead of, which is the step whose rows are kept here. Anything else (prefill
chunks, a request that was preempted or just admitted, a pipeline's micro-batches) takes
the general path, which fills the same arrays from the requests one by one.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter, is_

import numpy as np

_REQUEST_ID = attrgetter("request_id")


@dataclass(slots=True)
class HostInputs:
    """One step's inputs on the host, before the upload. Late rows (their token still
    being sampled by the step before) hold 0 in ``token_ids``."""
    token_ids: np.ndarray        # [num_tokens] int64
    positions: np.ndarray        # [num_tokens] int64
    slots: np.ndarray            # [num_tokens] int64
    sample_rows: np.ndarray      # [num_samples] int64: token row of each sampling request
    late_rows: np.ndarray        # [num_late] int64: token row of each late row
    late_sources: np.ndarray     # [num_late] int64: its sample row in the step before
    table: np.ndarray            # [num_seqs, width] int32
    seq_lens: np.ndarray         # [num_seqs] int32
    cu: np.ndarray               # [num_seqs + 1] int32
    query_lens: list[int]
    requests: list               # the sampling requests, in sample row order
    sample_seqs: np.ndarray      # [num_samples] int64: the sequence row of each sample
    # every row late, reading sample row i of the step before: those samples, as they
    # are, are the step's token ids
    late_in_order: bool = False


class DecodeRows:
    def __init__(self, block_size: int):
        self.block_size = block_size
        self.step = None      # the StepHandle launched from the kept rows (set by launch)
        self._ends = np.zeros(0, np.int64)         # per sample row: its sequence length
        self._table_rows = np.zeros(0, np.int64)   # per sample row: its block table row
        self._arange = np.arange(0, dtype=np.int64)

    def arange(self, n: int) -> np.ndarray:
        """0..n-1 (int64), from one array kept for it."""
        if len(self._arange) <= n:
            self._arange = np.arange(2 * n + 2, dtype=np.int64)
        return self._arange[:n]

    def remember(self, inputs: HostInputs) -> None:
        """Keep a step's sampling rows for the next; ``step`` stays unset until the
        caller launches this step (a step prepared but not launched is no base)."""
        self.step = None
        self._ends = inputs.seq_lens[inputs.sample_seqs].astype(np.int64)
        self._table_rows = inputs.sample_seqs

    def derive(self, out, block_tables: list[list[int]], ahead_of,
               tables) -> HostInputs | None:
        """The step's inputs from the kept rows, or None when the step does not qualify.
        ``out`` is the SchedulerOutput; ``tables`` the runner's BlockTableArray (it keeps
        the last matrix)."""
        requests = out.requests
        n = len(requests)
        if ahead_of is None or ahead_of is not self.step or not n \
                or sum(out.num_new_tokens) != n:
            return None
        # the same rows in the same order (nothing left since): no reordering at all, and
        # no look-up per row (the same objects: an id may have been reused since)
        before = ahead_of.requests
        in_order = len(requests) == len(before) and all(map(is_, requests, before))
        if in_order:
            src = self.arange(n)
        else:
            try:   # each request's sample row in the step before (no Python frame per row)
                sources = list(map(ahead_of.row_of.__getitem__, map(_REQUEST_ID, requests)))
            except KeyError:
                return None       # newly admitted, or did not sample last step
            # the same objects: an id may have been reused by a new request since
            if not all(map(is_, requests, map(before.__getitem__, sources))):
                return None
            src = np.array(sources, np.int64)
        positions = self._ends[src]
        bs = self.block_size
        table = tables.build(block_tables, None if in_order else self._table_rows[src],
                             unchanged=out.same_tables)
        rows = self.arange(n)
        slots = table[rows, positions // bs].astype(np.int64) * bs + positions % bs
        # every row samples and is late; ``rows`` is a view of the kept arange (no one
        # writes these arrays: the upload copies them)
        return HostInputs(
            token_ids=np.zeros(n, np.int64), positions=positions, slots=slots,
            sample_rows=rows, late_rows=rows, late_sources=src, table=table,
            seq_lens=(positions + 1).astype(np.int32),
            cu=self.arange(n + 1).astype(np.int32), query_lens=[1] * n,
            # in order: the step before's own list (equal), so its handle's map is reused
            requests=ahead_of.requests if in_order else requests, sample_seqs=rows,
            late_in_order=in_order)
