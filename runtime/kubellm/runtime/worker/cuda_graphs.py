"""CUDA graphs for decode steps.

A decode step of a few hundred sequences launches hundreds of small kernels; on an H200
their launch overhead rivals the work. One graph per batch size in {1, 2, 4, 8, 16, 32,
..., max_num_seqs} is captured over static input buffers; a step of n sequences replays
the smallest graph that fits, padding the extra rows (slot -1: no KV write; a one-token
context in block 0: harmless reads; their outputs are dropped).
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
                 sizes: list[int] | None = None):
        # the model, not the runner that owns this object: no reference cycle, so a
        # dropped engine frees its graph pools and KV cache at once, without the gc
        self.model = model
        self.sizes = sorted(sizes) if sizes else capture_sizes(max_num_seqs)
        self.max_bs = self.sizes[-1]
        dev = device
        self.token_ids = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.slot_mapping = torch.full((self.max_bs,), -1, dtype=torch.int64, device=dev)
        self.block_tables = torch.zeros((self.max_bs, max_blocks_per_seq), dtype=torch.int32,
                                        device=dev)
        self.seq_lens = torch.ones(self.max_bs, dtype=torch.int32, device=dev)
        self.cu_seqlens_q = torch.arange(self.max_bs + 1, dtype=torch.int32, device=dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.pool = None

    def _meta(self, bs: int) -> AttentionMetadata:
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:bs], block_tables=self.block_tables[:bs],
            seq_lens=self.seq_lens[:bs], cu_seqlens_q=self.cu_seqlens_q[:bs + 1],
            max_seqlen_q=1, seq_lens_cpu=[], query_lens_cpu=[],
            is_decode_only=True)

    def _run(self, bs: int) -> torch.Tensor:
        set_metadata(self._meta(bs))
        try:
            hidden, _ = self.model(self.token_ids[:bs], self.positions[:bs])
        finally:
            set_metadata(None)
        return hidden

    @torch.inference_mode()
    def capture(self) -> None:
        # largest first so that smaller graphs reuse its memory pool
        for bs in reversed(self.sizes):
            self._run(bs)                      # eager warm-up: Triton autotuning, caches
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                self.outputs[bs] = self._run(bs)
            if self.pool is None:
                self.pool = graph.pool()
            self.graphs[bs] = graph
        torch.cuda.synchronize()
        log.info("captured decode CUDA graphs for batch sizes %s", self.sizes)

    def fits(self, meta: AttentionMetadata) -> bool:
        return (len(meta.seq_lens_cpu) <= self.max_bs
                and meta.block_tables.shape[1] <= self.block_tables.shape[1])

    def replay(self, token_ids, positions, meta: AttentionMetadata) -> torch.Tensor:
        n = token_ids.shape[0]
        bs = next(s for s in self.sizes if s >= n)
        self.token_ids[:n].copy_(token_ids)
        self.positions[:n].copy_(positions)
        self.slot_mapping[:n].copy_(meta.slot_mapping)
        self.slot_mapping[n:bs].fill_(-1)
        width = meta.block_tables.shape[1]
        self.block_tables[:n, :width].copy_(meta.block_tables)
        self.seq_lens[:n].copy_(meta.seq_lens)
        self.seq_lens[n:bs].fill_(1)
        self.block_tables[n:bs, 0].fill_(0)
        self.graphs[bs].replay()
        return self.outputs[bs][:n]
