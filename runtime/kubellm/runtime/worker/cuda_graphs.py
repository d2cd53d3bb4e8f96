"""CUDA graphs for decode steps.

A decode step of a few hundred sequences launches hundreds of small kernels; on an H200
their launch overhead rivals the work. One graph per batch size in {1, 2, 4, 8, 16, 32,
..., max_num_seqs} is captured over static input buffers; a step of n sequences replays
the smallest graph that fits, padding the extra rows (slot -1: no KV write; a one-token
context in block 0: harmless reads; their outputs are dropped).

A pipeline stage's model (distributed/pipeline.py) is captured the same way, on every
rank: a later stage's graphs also read the previous stage's (hidden, residual) from
static buffers, and a stage before the last gives its residual out too. Tensor-parallel
collectives run inside the graphs; the sends between stages stay outside.
"""
from __future__ import annotations

import logging

import torch

from kubellm.runtime.attention.metadata import AttentionMetadata, set_metadata

log = logging.getLogger(__name__)


def capture_sizes(max_num_seqs: int) -> list[int]:
    sizes = [s for s in (1, 2, 4, 8) if s < max_num_seqs]
    sizes += list(range(16, max_num_seqs, 16))
    return sorted(set(sizes + [max_num_seqs]))


class DecodeGraphs:
    def __init__(self, model, device, max_num_seqs: int, max_blocks_per_seq: int,
                 dtype: torch.dtype | None = None):
        # the model, not the runner that owns this object: no reference cycle, so a
        # dropped engine frees its graph pools and KV cache at once, without the gc
        self.model = model
        self.sizes = capture_sizes(max_num_seqs)
        self.max_bs = self.sizes[-1]
        dev = device
        # a pipeline stage after the first starts from activations; one before the last
        # hands its residual on (a whole model does neither)
        self.takes_hidden = not getattr(model, "is_first_stage", True)
        self.gives_residual = not getattr(model, "is_last_stage", True)
        self.hidden_in = self.residual_in = None
        if self.takes_hidden:
            shape = (self.max_bs, model.args.hidden_size)
            self.hidden_in = torch.zeros(shape, dtype=dtype, device=dev)
            self.residual_in = torch.zeros(shape, dtype=dtype, device=dev)
        self.token_ids = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.slot_mapping = torch.full((self.max_bs,), -1, dtype=torch.int64, device=dev)
        self.block_tables = torch.zeros((self.max_bs, max_blocks_per_seq), dtype=torch.int32,
                                        device=dev)
        self.seq_lens = torch.ones(self.max_bs, dtype=torch.int32, device=dev)
        self.cu_seqlens_q = torch.arange(self.max_bs + 1, dtype=torch.int32, device=dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.pool = None

    def _meta(self, bs: int) -> AttentionMetadata:
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:bs], block_tables=self.block_tables[:bs],
            seq_lens=self.seq_lens[:bs], cu_seqlens_q=self.cu_seqlens_q[:bs + 1],
            max_seqlen_q=1, seq_lens_cpu=[], query_lens_cpu=[],
            is_decode_only=True)

    def _run(self, bs: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        hidden = residual = None
        if self.takes_hidden:
            hidden, residual = self.hidden_in[:bs], self.residual_in[:bs]
        set_metadata(self._meta(bs))
        try:
            hidden, residual = self.model(self.token_ids[:bs], self.positions[:bs], hidden,
                                          residual)
        finally:
            set_metadata(None)
        return hidden, residual if self.gives_residual else None

    @torch.inference_mode()
    def capture(self) -> None:
        # largest first so that smaller graphs reuse its memory pool
        for bs in reversed(self.sizes):
            self._run(bs)                      # eager warm-up: Triton autotuning, caches
            self.graphs[bs], self.outputs[bs] = self._capture_one(bs)
        torch.cuda.synchronize()
        log.info("captured decode CUDA graphs for batch sizes %s", self.sizes)

    def _capture_one(self, bs: int):
        """(graph, its static outputs) of batch size ``bs``."""
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = self._run(bs)
        if self.pool is None:
            self.pool = graph.pool()
        return graph, outputs

    def fits(self, meta: AttentionMetadata) -> bool:
        return (len(meta.seq_lens_cpu) <= self.max_bs
                and meta.block_tables.shape[1] <= self.block_tables.shape[1])

    def replay(self, token_ids, positions, meta: AttentionMetadata, hidden=None,
               residual=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(hidden, residual) of the step's ``n`` rows; residual None on the last stage.
        They are views of the graph's static outputs: the next replay overwrites them."""
        n = token_ids.shape[0]
        bs = next(s for s in self.sizes if s >= n)
        self.token_ids[:n].copy_(token_ids)
        self.positions[:n].copy_(positions)
        if self.takes_hidden:
            self.hidden_in[:n].copy_(hidden)
            self.residual_in[:n].copy_(residual)
        self.slot_mapping[:n].copy_(meta.slot_mapping)
        self.slot_mapping[n:bs].fill_(-1)
        width = meta.block_tables.shape[1]
        self.block_tables[:n, :width].copy_(meta.block_tables)
        self.seq_lens[:n].copy_(meta.seq_lens)
        self.seq_lens[n:bs].fill_(1)
        self.block_tables[n:bs, 0].fill_(0)
        self.graphs[bs].replay()
        hidden, residual = self.outputs[bs]
        return hidden[:n], residual[:n] if residual is not None else None
