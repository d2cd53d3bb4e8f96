"""What the driver sends every rank each step: only this step's work, never request state.

Per scheduled sequence: the token ids computed this step, where they start, whether the
step samples after them, and its block table as a diff — the blocks added since the
previous step when the sequence ran in it, the whole table otherwise — which every rank
turns back into full tables (BlockTableMirror) and then into positions and slot mapping
exactly as the single-process runner does. The sequences are cut into micro-batches
that flow through the pipeline one after another.

With async scheduling a decode may be planned before the token it computes is back from
the device (``late``): its chunk carries a placeholder, and the first stage fills in the
real token on the device (PipelineStage.run).
"""
from __future__ import annotations

from dataclasses import dataclass

from kubellm.runtime.core.scheduler import ScheduledRequest, SchedulerOutput


@dataclass
class StepWork:
    step: int
    request_ids: list[str]
    token_ids: list[list[int]]          # per sequence: the tokens computed this step
    starts: list[int]                   # position of each sequence's first new token
    samples: list[bool]                 # the step samples a token after the sequence
    table_updates: list[tuple[bool, list[int]]]  # (is whole table, blocks) per sequence
    table_lens: list[int]               # blocks in each full table: catches a lost diff
    micro_batches: list[tuple[int, int]]  # [lo, hi) ranges of sequences, in order
    late: list[bool]                    # the one token is still being sampled

    @classmethod
    def from_schedule(cls, step: int, out: SchedulerOutput, block_tables: list[list[int]],
                      max_micro_batches: int, diffs: "BlockTableDiffs") -> "StepWork":
        scheduled = out.scheduled
        late = [s.start == len(s.request.all_token_ids) for s in scheduled]
        token_ids = [[0] if is_late else s.request.all_token_ids[s.start:s.start +
                                                                 s.num_new_tokens]
                     for s, is_late in zip(scheduled, late)]
        return cls(step, [s.request.request_id for s in scheduled], token_ids,
                   [s.start for s in scheduled], [s.samples for s in scheduled],
                   diffs.encode(scheduled, block_tables), [len(t) for t in block_tables],
                   split_micro_batches([len(t) for t in token_ids], max_micro_batches), late)

    def num_tokens(self, micro_batch: int) -> int:
        lo, hi = self.micro_batches[micro_batch]
        return sum(len(t) for t in self.token_ids[lo:hi])

    def num_samples(self, micro_batch: int) -> int:
        lo, hi = self.micro_batches[micro_batch]
        return sum(self.samples[lo:hi])

    def late_rows(self, micro_batch: int) -> tuple[list[int], list[int]]:
        """The micro-batch's rows that hold a late token, and for each its index among
        the step's late tokens (``late`` order)."""
        lo, hi = self.micro_batches[micro_batch]
        before = sum(self.late[:lo])
        rows, index, row = [], [], 0
        for i in range(lo, hi):
            if self.late[i]:
                rows.append(row)
                index.append(before)
                before += 1
            row += len(self.token_ids[i])
        return rows, index

    def scheduler_output(self, micro_batch: int, block_tables: list[list[int]]
                         ) -> tuple[SchedulerOutput, list[list[int]]]:
        """The micro-batch in the shape ModelRunner.prepare_inputs reads."""
        lo, hi = self.micro_batches[micro_batch]
        scheduled = [ScheduledRequest(_ChunkSequence(i, self.token_ids[i], self.starts[i],
                                                     self.samples[i]),
                                      len(self.token_ids[i]), self.starts[i])
                     for i in range(lo, hi)]
        return SchedulerOutput(scheduled), block_tables[lo:hi]


class BlockTableDiffs:
    """Driver side. A table only grows while its request runs (it is rebuilt after a
    preemption), so a sequence that also ran in the previous step — the same Request
    object, not preempted since — needs only its new blocks. Only the previous step is
    remembered: a sequence that sat a step out is sent whole, and nothing accumulates."""

    def __init__(self):
        # request id -> (the Request, its preemptions, blocks sent) as of the previous step
        self._previous: dict[str, tuple[object, int, int]] = {}

    def encode(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]]
               ) -> list[tuple[bool, list[int]]]:
        current, updates = {}, []
        for s, table in zip(scheduled, block_tables):
            request = s.request
            seen = self._previous.get(request.request_id)
            if seen is not None and seen[0] is request and seen[1] == request.num_preemptions:
                updates.append((False, table[seen[2]:]))
            else:
                updates.append((True, list(table)))
            current[request.request_id] = (request, request.num_preemptions, len(table))
        self._previous = current
        return updates


class BlockTableMirror:
    """Every rank: the full block tables of a step, from its diffs and the previous step's
    tables (the same bookkeeping as BlockTableDiffs, on the receiving side)."""

    def __init__(self):
        self._previous: dict[str, list[int]] = {}

    def rebuild(self, work: StepWork) -> list[list[int]]:
        current, tables = {}, []
        for request_id, (is_whole, blocks), num_blocks in zip(
                work.request_ids, work.table_updates, work.table_lens):
            table = list(blocks) if is_whole else self._previous[request_id] + blocks
            if len(table) != num_blocks:
                raise RuntimeError(f"step {work.step}: block table of {request_id!r} has "
                                   f"{len(table)} blocks here, {num_blocks} on the driver")
            current[request_id] = table
            tables.append(table)
        self._previous = current
        return tables


def split_micro_batches(num_tokens: list[int], max_groups: int) -> list[tuple[int, int]]:
    """Cut the sequences, in order, into min(max_groups, len) non-empty contiguous groups
    of about equal token counts (each group is one micro-batch)."""
    n = len(num_tokens)
    groups = min(max_groups, n)
    total = sum(num_tokens)
    cuts, acc = [], 0
    for i in range(n - 1):
        if len(cuts) == groups - 1:
            break
        acc += num_tokens[i]
        must_cut = n - 1 - i == groups - 1 - len(cuts)  # one sequence left per group
        if must_cut or acc * groups >= total * (len(cuts) + 1):
            cuts.append(i + 1)
    bounds = [0, *cuts, n]
    return list(zip(bounds[:-1], bounds[1:]))


class _ChunkSequence:
    """Stands in for a Request on ranks that see only this step's chunk of it: token
    ids are indexed by absolute position, as ``Request.all_token_ids`` is."""
    __slots__ = ("request_id", "all_token_ids", "num_scheduled_tokens")

    def __init__(self, index: int, chunk: list[int], start: int, samples: bool):
        self.request_id = index
        self.all_token_ids = _OffsetTokens(chunk, start)
        # ScheduledRequest re-derives ``samples`` as "the chunk ends at the last token"
        self.num_scheduled_tokens = start + len(chunk) + (0 if samples else 1)


class _OffsetTokens:
    __slots__ = ("chunk", "start")

    def __init__(self, chunk: list[int], start: int):
        self.chunk, self.start = chunk, start

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.chunk[key.start - self.start:key.stop - self.start]
        return self.chunk[key - self.start]
