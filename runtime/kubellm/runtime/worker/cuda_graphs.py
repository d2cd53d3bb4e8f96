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


def forward_on(model, meta: AttentionMetadata, token_ids, positions, hidden, residual,
               gives_residual: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The model (or stage) over a graph's static buffers with this metadata."""
    set_metadata(meta)
    try:
        hidden, residual = model(token_ids, positions, hidden, residual)
    finally:
        set_metadata(None)
    return hidden, residual if gives_residual else None


def capture_graph(run, pool):
    """(graph, the static outputs of ``run()``) captured into ``pool`` (None: a new one,
    the graph's own)."""
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        outputs = run()
    return graph, outputs


class StaticGraphs:
    """What decode and mixed-step graphs share: the model run over the subclass's static
    buffers (``token_ids``, ``positions``, a later stage's ``hidden_in``/``residual_in``)
    with its ``_meta(size)``, and one graph per size captured largest first, so that the
    smaller ones reuse its memory pool."""
    sizes: list[int]

    def _run(self, size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        hidden = residual = None
        if self.takes_hidden:
            hidden, residual = self.hidden_in[:size], self.residual_in[:size]
        return forward_on(self.model, self._meta(size), self.token_ids[:size],
                          self.positions[:size], hidden, residual, self.gives_residual)

    @torch.inference_mode()
    def capture(self) -> None:
        for size in reversed(self.sizes):
            self._run(size)                    # eager warm-up: Triton autotuning, caches
            graph, self.outputs[size] = capture_graph(lambda s=size: self._run(s), self.pool)
            if self.pool is None:
                self.pool = graph.pool()
            self.graphs[size] = graph
        torch.cuda.synchronize()
        log.info("captured %s", self.describe())

    def _take_tokens(self, token_ids, positions, meta: AttentionMetadata, hidden,
                     residual) -> tuple[int, int]:
        """Copy a step's ``n`` token rows into the static buffers (slots past them -1: no
        KV write) -> (n, the graph size that holds them)."""
        n = token_ids.shape[0]
        size = next(s for s in self.sizes if s >= n)
        self.token_ids[:n].copy_(token_ids)
        self.positions[:n].copy_(positions)
        if self.takes_hidden:
            self.hidden_in[:n].copy_(hidden)
            self.residual_in[:n].copy_(residual)
        self.slot_mapping[:n].copy_(meta.slot_mapping)
        self.slot_mapping[n:size].fill_(-1)
        return n, size

    def _replay(self, size: int, n: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Replay the graph of ``size`` (not captured: run the model eagerly on the same
        buffers) -> the first ``n`` rows of its outputs."""
        if self.graphs:
            self.graphs[size].replay()
            hidden, residual = self.outputs[size]
        else:
            hidden, residual = self._run(size)
        return hidden[:n], residual[:n] if residual is not None else None


def capture_sizes(max_num_seqs: int) -> list[int]:
    sizes = [s for s in (1, 2, 4, 8) if s < max_num_seqs]
    sizes += list(range(16, max_num_seqs, 16))
    return sorted(set(sizes + [max_num_seqs]))


class DecodeGraphs(StaticGraphs):
    def __init__(self, model, device, max_num_seqs: int, max_blocks_per_seq: int,
                 dtype: torch.dtype | None = None, sizes: list[int] | None = None):
        # the model, not the runner that owns this object: no reference cycle, so a
        # dropped engine frees its graph pools and KV cache at once, without the gc
        self.model = model
        self.sizes = sorted(sizes) if sizes else capture_sizes(max_num_seqs)
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

    def describe(self) -> str:
        return f"decode CUDA graphs for batch sizes {self.sizes}"

    def fits(self, meta: AttentionMetadata) -> bool:
        return (len(meta.seq_lens_cpu) <= self.max_bs
                and meta.block_tables.shape[1] <= self.block_tables.shape[1])

    def replay(self, token_ids, positions, meta: AttentionMetadata, hidden=None,
               residual=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(hidden, residual) of the step's ``n`` rows; residual None on the last stage.
        They are views of the graph's static outputs: the next replay overwrites them."""
        n, bs = self._take_tokens(token_ids, positions, meta, hidden, residual)
        width = meta.block_tables.shape[1]
        self.block_tables[:n, :width].copy_(meta.block_tables)
        self.seq_lens[:n].copy_(meta.seq_lens)
        self.seq_lens[n:bs].fill_(1)
        self.block_tables[n:bs, 0].fill_(0)
        return self._replay(bs, n)
