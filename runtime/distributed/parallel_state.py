"""Which tensor-parallel and pipeline-parallel rank this process is, and the groups.

Single-process runs never call ``init_parallel`` and see TP = PP = 1, so layers can ask
these functions unconditionally.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class ParallelState:
    tp_size: int = 1
    tp_rank: int = 0
    pp_size: int = 1
    pp_rank: int = 0
    tp_group: object = None
    pp_group: object = None


_STATE = ParallelState()


def state() -> ParallelState:
    return _STATE


def set_state(new: ParallelState) -> None:
    global _STATE
    _STATE = new


def tp_size() -> int:
    return _STATE.tp_size


def tp_rank() -> int:
    return _STATE.tp_rank


def tp_all_reduce(x: torch.Tensor) -> torch.Tensor:
    if _STATE.tp_size == 1:
        return x
    dist.all_reduce(x, group=_STATE.tp_group)
    return x


def tp_all_gather_last_dim(x: torch.Tensor) -> torch.Tensor:
    if _STATE.tp_size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(_STATE.tp_size)]
    dist.all_gather(parts, x.contiguous(), group=_STATE.tp_group)
    return torch.cat(parts, dim=-1)
