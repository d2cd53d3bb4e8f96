"""Vocabulary-parallel embedding and LM head: each rank holds a contiguous slice of the
vocabulary (padded so that it splits evenly)."""
from __future__ import annotations

import torch
from torch import nn

from kubellm.runtime.parallel import state as ps


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden: int):
        super().__init__()
        self.vocab_size = vocab_size
        parallel = ps.state()  # kept: the reductions run in this layout's group
        self.tp_size, self.tp_rank, self.tp_group = \
            parallel.tp_size, parallel.tp_rank, parallel.tp_group
        self.per_rank = -(-vocab_size // self.tp_size)
        self.vocab_start = self.tp_rank * self.per_rank
        self.vocab_end = min(self.vocab_start + self.per_rank, vocab_size)
        self.weight = nn.Parameter(torch.empty(self.per_rank, hidden), requires_grad=False)

    def load_weight(self, param, loaded, shard_id=None):
        rows = self.vocab_end - self.vocab_start
        param.data[:rows].copy_(loaded[self.vocab_start:self.vocab_end])
        param.data[rows:].zero_()

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return nn.functional.embedding(token_ids, self.weight)
        in_range = (token_ids >= self.vocab_start) & (token_ids < self.vocab_end)
        local = torch.where(in_range, token_ids - self.vocab_start, 0)
        out = nn.functional.embedding(local, self.weight) * in_range.unsqueeze(-1)
        return ps.all_reduce(out, self.tp_group)

    def gather_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Each rank's logits of its vocabulary slice -> the whole (padded) vocabulary."""
        return ps.all_gather_last_dim(logits, self.tp_group, self.tp_size)


class ParallelLMHead(VocabParallelEmbedding):
    """The untied output projection: same vocabulary split as the embedding."""
