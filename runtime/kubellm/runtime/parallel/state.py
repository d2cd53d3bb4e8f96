"""Which tensor-parallel and pipeline-parallel rank this process is, and the groups.

Single-process runs never call ``initialize`` and see TP = PP = 1, so layers can ask
these functions unconditionally.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from kubellm.runtime.parallel import comm_timing


@dataclass
class ParallelState:
    tp_size: int = 1
    tp_rank: int = 0
    pp_size: int = 1
    pp_rank: int = 0
    tp_group: object = None
    pp_group: object = None
    control_group: object = None  # gloo, CPU: per-step metadata from the driver
    # MoE experts split whole over the TP ranks instead of each expert's projections
    # (set from EngineConfig.enable_expert_parallel before the model is built)
    expert_parallel: bool = False


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
    with comm_timing.span("all_reduce"):
        dist.all_reduce(x, group=_STATE.tp_group)
    return x


def tp_all_gather_last_dim(x: torch.Tensor) -> torch.Tensor:
    if _STATE.tp_size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(_STATE.tp_size)]
    with comm_timing.span("all_gather"):
        dist.all_gather(parts, x.contiguous(), group=_STATE.tp_group)
    return torch.cat(parts, dim=-1)


def initialize(layout, init_method: str, backend: str, timeout_s: float) -> None:
    """Join the world as ``layout.rank`` and build the groups every rank must create in
    the same order: the CPU control group, then one TP group per pipeline stage."""
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(backend, init_method=init_method, rank=layout.rank,
                            world_size=layout.world_size, timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout)
    tp_group = None
    if layout.tp_size > 1:
        for stage in range(layout.pp_size):
            group = dist.new_group(layout.tp_group_ranks(stage), timeout=timeout)
            if stage == layout.pp_rank:
                tp_group = group
    set_state(ParallelState(layout.tp_size, layout.tp_rank, layout.pp_size, layout.pp_rank,
                            tp_group=tp_group, control_group=control))
    comm_timing.configure(os.environ, is_cuda=backend == "nccl")


def share_cpu_cores(device: torch.device, procs_on_node: int, env=os.environ) -> int | None:
    """CPU ranks on one node split its cores instead of each taking all of them (torch's
    default): oversubscribed, a PP=2 step on 2 cores ran ~50x slower. An explicit
    OMP_NUM_THREADS wins. Returns the threads set, None when left alone."""
    if device.type != "cpu" or "OMP_NUM_THREADS" in env:
        return None
    threads = max(1, (os.cpu_count() or 1) // max(1, procs_on_node))
    torch.set_num_threads(threads)
    return threads


def destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
    set_state(ParallelState())
    comm_timing.reset()
