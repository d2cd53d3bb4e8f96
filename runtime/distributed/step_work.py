"""What the driver sends every rank each step: only this step's work, never request state.

Per scheduled sequence: the token ids computed this step, where they start, whether the
step samples after them, and the block table (each rank derives positions and slot
mapping from these exactly as the single-process runner does). The sequences are cut
into micro-batches that flow through the pipeline one after another.
"""
from __future__ import annotations

from dataclasses import dataclass

from kubellm.runtime.scheduler import ScheduledRequest, SchedulerOutput


@dataclass
class StepWork:
    step: int
    token_ids: list[list[int]]          # per sequence: the tokens computed this step
    starts: list[int]                   # position of each sequence's first new token
    samples: list[bool]                 # the step samples a token after the sequence
    block_tables: list[list[int]]
    micro_batches: list[tuple[int, int]]  # [lo, hi) ranges of sequences, in order

    @classmethod
    def from_schedule(cls, step: int, out: SchedulerOutput, block_tables: list[list[int]],
                      max_micro_batches: int) -> "StepWork":
        scheduled = out.scheduled
        token_ids = [s.request.all_token_ids[s.start:s.start + s.num_new_tokens]
                     for s in scheduled]
        return cls(step, token_ids, [s.start for s in scheduled],
                   [s.samples for s in scheduled], [list(t) for t in block_tables],
                   split_micro_batches([len(t) for t in token_ids], max_micro_batches))

    def num_tokens(self, micro_batch: int) -> int:
        lo, hi = self.micro_batches[micro_batch]
        return sum(len(t) for t in self.token_ids[lo:hi])

    def num_samples(self, micro_batch: int) -> int:
        lo, hi = self.micro_batches[micro_batch]
        return sum(self.samples[lo:hi])

    def scheduler_output(self, micro_batch: int) -> tuple[SchedulerOutput, list[list[int]]]:
        """The micro-batch in the shape ModelRunner.prepare_inputs reads."""
        lo, hi = self.micro_batches[micro_batch]
        scheduled = [ScheduledRequest(_ChunkSequence(i, self.token_ids[i], self.starts[i],
                                                     self.samples[i]),
                                      len(self.token_ids[i]), self.starts[i])
                     for i in range(lo, hi)]
        return SchedulerOutput(scheduled), self.block_tables[lo:hi]


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
    __slots__ = ("request_id", "all_token_ids", "num_tokens")

    def __init__(self, index: int, chunk: list[int], start: int, samples: bool):
        self.request_id = index
        self.all_token_ids = _OffsetTokens(chunk, start)
        # ScheduledRequest re-derives ``samples`` as "the chunk ends at the last token"
        self.num_tokens = start + len(chunk) + (0 if samples else 1)


class _OffsetTokens:
    __slots__ = ("chunk", "start")

    def __init__(self, chunk: list[int], start: int):
        self.chunk, self.start = chunk, start

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.chunk[key.start - self.start:key.stop - self.start]
        return self.chunk[key - self.start]
