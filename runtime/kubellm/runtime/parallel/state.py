"""Which tensor-parallel and pipeline-parallel rank a model is built for, and its groups.

A model's parallel layers read ``state()`` once, when they are built, and keep what they
need (their shard, their TP group): at run time nothing reads a process-wide setting, so
a single-process engine built next to (or after) a multi-process one in the same process
is unaffected by it. ``building(state)`` sets the state for the code that builds a
rank's model; anywhere else ``state()`` is the single-process one (TP = PP = 1).

torch.distributed holds one default group per process, so a process joins one
multi-process engine's groups at a time: ``initialize`` says so clearly when another
one is still up, and ``destroy`` leaves them so that the next engine can join its own.
"""
from __future__ import annotations

import contextlib
import gc
import os
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from kubellm.runtime.parallel import comm_timing


@dataclass(frozen=True)
class ParallelState:
    tp_size: int = 1
    tp_rank: int = 0
    pp_size: int = 1
    pp_rank: int = 0
    tp_group: object = None
    control_group: object = None    # gloo, CPU: per-step metadata from the driver
    heartbeat_group: object = None  # gloo, CPU: liveness rounds (distributed/heartbeat.py)
    backend: str = "gloo"           # of the default group and the TP groups

    @property
    def groups(self) -> list:
        return [g for g in (self.tp_group, self.control_group, self.heartbeat_group) if g]


SINGLE_PROCESS = ParallelState()
_BUILDING: ContextVar[ParallelState] = ContextVar("kubellm_parallel_state",
                                                  default=SINGLE_PROCESS)
_OWNER: list[str] = []  # what holds this process's default group, for the error message


def state() -> ParallelState:
    """The layout the model being built is for (single-process outside ``building``)."""
    return _BUILDING.get()


@contextlib.contextmanager
def building(parallel: ParallelState):
    """Build a rank's model for ``parallel`` (a context variable: per thread)."""
    token = _BUILDING.set(parallel)
    try:
        yield parallel
    finally:
        _BUILDING.reset(token)


def tp_size() -> int:
    return state().tp_size


def tp_rank() -> int:
    return state().tp_rank


def all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    """Sum over ``group`` in place (``None``: one rank, nothing to do)."""
    if group is None:
        return x
    with comm_timing.span("all_reduce"):
        dist.all_reduce(x, group=group)
    return x


def all_gather_last_dim(x: torch.Tensor, group, size: int) -> torch.Tensor:
    if group is None:
        return x
    parts = [torch.empty_like(x) for _ in range(size)]
    with comm_timing.span("all_gather"):
        dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=-1)


def ensure_free() -> None:
    """Raise, saying what to do, when this process already belongs to a process group."""
    if dist.is_initialized():
        gc.collect()  # an engine dropped inside a reference cycle leaves its groups then
    if dist.is_initialized():
        owner = _OWNER[0] if _OWNER else "torch.distributed, initialized outside kubellm"
        raise RuntimeError(f"this process already belongs to a process group ({owner}); a "
                           "process runs one multi-process engine at a time: shut the other "
                           "down first (LLM.shutdown(), or `with LLM(...) as llm:`)")


def initialize(layout, store, backend: str, timeout_s: float) -> ParallelState:
    """Join the world of ``store`` (every rank connected) as ``layout.rank`` and build the
    groups every rank must create in the same order: the CPU control and heartbeat groups,
    then one TP group per stage."""
    ensure_free()
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(backend, store=store, rank=layout.rank,
                            world_size=layout.world_size, timeout=timeout)
    _OWNER[:] = [f"a multi-process engine, TP {layout.tp_size} x PP {layout.pp_size}"]
    control = dist.new_group(backend="gloo", timeout=timeout)
    heartbeat = dist.new_group(backend="gloo", timeout=timeout)
    tp_group = None
    if layout.tp_size > 1:
        for stage in range(layout.pp_size):
            group = dist.new_group(layout.tp_group_ranks(stage), timeout=timeout)
            if stage == layout.pp_rank:
                tp_group = group
    comm_timing.configure(os.environ, is_cuda=backend == "nccl")
    return ParallelState(layout.tp_size, layout.tp_rank, layout.pp_size, layout.pp_rank,
                         tp_group=tp_group, control_group=control, heartbeat_group=heartbeat,
                         backend=backend)


def abort(parallel: ParallelState) -> None:
    """A peer is gone: wake whatever waits on it. NCCL collectives wait on the GPU until
    aborted; gloo ones fail by themselves once the peer's connections close."""
    if parallel.backend != "nccl" or not dist.is_initialized():
        return
    for group in [parallel.tp_group, dist.distributed_c10d._get_default_group()]:
        with contextlib.suppress(Exception):
            if group is not None:
                group.abort()


def destroy() -> None:
    """Leave every group of this process (safe to call when there are none)."""
    if dist.is_initialized():
        dist.destroy_process_group()
    _OWNER.clear()
    comm_timing.reset()


def share_cpu_cores(device: torch.device, procs_on_node: int, env=os.environ) -> int | None:
    """CPU ranks on one node split its cores instead of each taking all of them (torch's
    default): oversubscribed, a PP=2 step on 2 cores ran ~50x slower. An explicit
    OMP_NUM_THREADS wins. Returns the threads set, None when left alone."""
    if device.type != "cpu" or "OMP_NUM_THREADS" in env:
        return None
    threads = max(1, (os.cpu_count() or 1) // max(1, procs_on_node))
    torch.set_num_threads(threads)
    return threads
