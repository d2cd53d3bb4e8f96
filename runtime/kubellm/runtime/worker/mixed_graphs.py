"""CUDA graphs for steps that mix prefill chunks with decodes (the ``mixed_graphs`` switch).

Such a step runs eagerly otherwise: ~12 launches per layer, ~390 for an 8B model, which
the host issues one by one. On the H200 a 512-token prompt joining 20 decodes took
25-46 ms of device time for ~13 ms of kernels (2026-12-02 calls 11-13): the GPU waited
on the host. Here one graph per token count (multiples of ``TOKEN_STEP`` up to
``MAX_TOKENS``) is captured over static buffers, and a step replays the smallest that
holds its tokens.

What makes a mixed step capturable: the Triton backend attends through the paged kernel
alone when the step's longest chunk is shorter than PREFILL_KERNEL_MIN_QUERY, and that
kernel reads only device tensors; its tiles are chosen from ``max_seqlen_q``, which the
graph fixes at the prefill tiles (correct for any chunk length, decodes included, as an
eager mixed step already runs them), and its grid covers ``tokens // tile + sequences``
programs, so a graph captured for ``T`` tokens and ``max_num_seqs`` sequences covers any
step with at most that many. Padding: tokens past the step's ``n`` have slot -1 (no KV
write) and belong to no sequence; sequences past its ``s`` have no query tokens
(``cu_seqlens_q`` stays at ``n``), so their programs return at once. Every other layer
works row by row, so padded rows change nothing in the real ones; their outputs are
dropped.

Until ``capture()`` (never, on the CPU's tests) a replay runs the model eagerly on the
same buffers: the padding and the metadata are what a graph would see.
"""
from __future__ import annotations

import torch

from kubellm.runtime.attention.metadata import AttentionMetadata
from kubellm.runtime.worker.cuda_graphs import StaticGraphs

TOKEN_STEP = 128      # graph sizes: multiples of this many tokens
MAX_TOKENS = 2048     # larger steps keep the device busy eagerly


def token_sizes(max_num_batched_tokens: int) -> list[int]:
    """Token counts to capture: multiples of TOKEN_STEP up to the step budget (itself the
    last size), MAX_TOKENS at most."""
    top = min(max_num_batched_tokens, MAX_TOKENS)
    sizes = list(range(TOKEN_STEP, top + 1, TOKEN_STEP))
    return sizes if sizes and sizes[-1] == top else sizes + [top]


class MixedGraphs(StaticGraphs):
    def __init__(self, model, device, max_num_seqs: int, max_blocks_per_seq: int,
                 dtype: torch.dtype | None, sizes: list[int], max_query: int):
        """``max_query``: the step's longest chunk a graph serves (shorter than the
        prefill kernel's bound); it picks the paged kernel's tiles."""
        self.model = model
        self.sizes = sorted(sizes)
        self.max_tokens = self.sizes[-1]
        self.max_seqs = max_num_seqs
        self.max_query = max_query
        self.takes_hidden = not getattr(model, "is_first_stage", True)
        self.gives_residual = not getattr(model, "is_last_stage", True)
        t, s, dev = self.max_tokens, max_num_seqs, device
        self.hidden_in = self.residual_in = None
        if self.takes_hidden:
            self.hidden_in = torch.zeros((t, model.args.hidden_size), dtype=dtype, device=dev)
            self.residual_in = torch.zeros_like(self.hidden_in)
        self.token_ids = torch.zeros(t, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(t, dtype=torch.int64, device=dev)
        self.slot_mapping = torch.full((t,), -1, dtype=torch.int64, device=dev)
        self.block_tables = torch.zeros((s, max_blocks_per_seq), dtype=torch.int32, device=dev)
        self.seq_lens = torch.ones(s, dtype=torch.int32, device=dev)
        self.cu_seqlens_q = torch.zeros(s + 1, dtype=torch.int32, device=dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.pool = None

    def _meta(self, num_tokens: int) -> AttentionMetadata:
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:num_tokens], block_tables=self.block_tables,
            seq_lens=self.seq_lens, cu_seqlens_q=self.cu_seqlens_q,
            max_seqlen_q=self.max_query, seq_lens_cpu=[], query_lens_cpu=[],
            is_decode_only=False)

    def describe(self) -> str:
        return (f"mixed-step CUDA graphs for {self.sizes} tokens (chunks of at most "
                f"{self.max_query} tokens, up to {self.max_seqs} sequences)")

    def fits(self, meta: AttentionMetadata) -> bool:
        return (not meta.is_decode_only and meta.max_seqlen_q <= self.max_query
                and meta.slot_mapping.shape[0] <= self.max_tokens
                and meta.block_tables.shape[0] <= self.max_seqs
                and meta.block_tables.shape[1] <= self.block_tables.shape[1])

    def replay(self, token_ids, positions, meta: AttentionMetadata, hidden=None,
               residual=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(hidden, residual) of the step's ``n`` token rows (views of the graph's static
        outputs: the next replay overwrites them); residual None on the last stage."""
        n, size = self._take_tokens(token_ids, positions, meta, hidden, residual)
        s = meta.block_tables.shape[0]
        self.block_tables[:s, :meta.block_tables.shape[1]].copy_(meta.block_tables)
        self.seq_lens[:s].copy_(meta.seq_lens)
        self.cu_seqlens_q[:s + 1].copy_(meta.cu_seqlens_q)
        # the sequences past s own no tokens: their programs return before reading more
        self.cu_seqlens_q[s + 1:].copy_(self.cu_seqlens_q[s].expand(self.max_seqs - s))
        return self._replay(size, n)
