"""Per-step attention inputs, built once by the model runner and read by every layer."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor      # [T] int64: cache slot of each new token (-1: skip)
    block_tables: torch.Tensor      # [B, max_blocks] int32
    seq_lens: torch.Tensor          # [B] int32: context length incl. this step's tokens
    cu_seqlens_q: torch.Tensor      # [B+1] int32: start of each sequence's new tokens
    max_seqlen_q: int
    seq_lens_cpu: list[int]         # host copies for backends that loop in Python
    query_lens_cpu: list[int]
    is_decode_only: bool = False
    # the first num_decodes sequences have one query token each (the scheduler puts a
    # step's decodes first); a backend may attend to them apart from the prefills
    num_decodes: int = 0
    # what a backend derives from this step's metadata once and reuses in every layer
    scratch: dict = field(default_factory=dict)


_CURRENT: AttentionMetadata | None = None


def set_metadata(meta: AttentionMetadata | None) -> None:
    global _CURRENT
    _CURRENT = meta


def get_metadata() -> AttentionMetadata:
    if _CURRENT is None:
        raise RuntimeError("attention called outside a model-runner step")
    return _CURRENT
