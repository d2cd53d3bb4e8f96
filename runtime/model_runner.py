"""Turns a SchedulerOutput into one forward pass and sampled tokens.

Builds the flat varlen inputs (token ids, positions, slot mapping, block tables,
sequence lengths), runs the model, takes the last hidden state of every request whose
chunk reaches its end, and samples. Owns the KV-cache tensors.
"""
from __future__ import annotations

import logging

import torch

from kubellm.runtime.attention import torch_backend
from kubellm.runtime.attention.metadata import AttentionMetadata, set_metadata
from kubellm.runtime.layers.attention import Attention
from kubellm.runtime.scheduler import SchedulerOutput

log = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, model: torch.nn.Module, sampler, device: torch.device,
                 dtype: torch.dtype, block_size: int, attention_backend: str = "torch"):
        self.model = model
        self.sampler = sampler
        self.device = device
        self.dtype = dtype
        self.block_size = block_size
        self.attn_layers = [m for m in model.modules() if isinstance(m, Attention)]
        self.backend = _load_backend(attention_backend)
        for layer in self.attn_layers:
            layer.backend = self.backend
        self.num_blocks = 0
        self.vocab_size = model.args.vocab_size

    # ---- KV cache ------------------------------------------------------------------
    def kv_bytes_per_block(self) -> int:
        layer = self.attn_layers[0]
        per_layer = 2 * self.block_size * layer.num_kv_heads * layer.head_dim
        return per_layer * len(self.attn_layers) * torch.finfo(self.dtype).bits // 8

    def allocate_kv_cache(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        for layer in self.attn_layers:
            shape = (num_blocks, self.block_size, layer.num_kv_heads, layer.head_dim)
            layer.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
            layer.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)

    # ---- one step ------------------------------------------------------------------
    @torch.inference_mode()
    def execute(self, out: SchedulerOutput, block_tables: list[list[int]]):
        """Returns (sampled token per sampling request id, logprobs per request id)."""
        token_ids, positions, meta, sample_rows = self.prepare_inputs(out, block_tables)
        set_metadata(meta)
        try:
            hidden, _ = self.model(token_ids, positions)
        finally:
            set_metadata(None)
        if not sample_rows:
            return {}, {}
        rows, requests = zip(*sample_rows)
        logits = self.model.compute_logits(hidden[list(rows)]).float()
        result = self.sampler(logits, [r.sampling_state for r in requests])
        ids = {r.request_id: t for r, t in zip(requests, result.token_ids)}
        logprobs = {r.request_id: lp for r, lp in zip(requests, result.logprobs)}
        return ids, logprobs

    def prepare_inputs(self, out: SchedulerOutput, block_tables: list[list[int]]):
        token_ids, positions, slots = [], [], []
        seq_lens, query_lens, cu = [], [], [0]
        sample_rows = []
        bs = self.block_size
        for s, table in zip(out.scheduled, block_tables):
            start, n = s.start, s.num_new_tokens
            token_ids += s.request.all_token_ids[start:start + n]
            positions += range(start, start + n)
            slots += [table[p // bs] * bs + p % bs for p in range(start, start + n)]
            seq_lens.append(start + n)
            query_lens.append(n)
            cu.append(cu[-1] + n)
            if s.samples:
                sample_rows.append((cu[-1] - 1, s.request))
        width = max(len(t) for t in block_tables)
        padded = [t + [0] * (width - len(t)) for t in block_tables]
        dev = self.device
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=dev),
            block_tables=torch.tensor(padded, dtype=torch.int32, device=dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=dev),
            max_seqlen_q=max(query_lens), max_seqlen_k=max(seq_lens),
            seq_lens_cpu=seq_lens, query_lens_cpu=query_lens,
            is_decode_only=max(query_lens) == 1)
        return (torch.tensor(token_ids, dtype=torch.int64, device=dev),
                torch.tensor(positions, dtype=torch.int64, device=dev), meta, sample_rows)


def _load_backend(name: str):
    if name == "torch":
        return torch_backend
    if name == "triton":
        from kubellm.runtime.attention import triton_backend
        return triton_backend
    raise ValueError(f"unknown attention backend {name!r}")
