"""Assembling the engine on the driver (global rank 0) of a TP x PP group.

A build that fails undoes itself: workers killed, process groups left, tensors freed,
torch's thread count restored; a worker that dies while the engine starts makes the
build raise an EngineDeadError naming it (the rendezvous wait checks between polls; a
collective fails once the dead peer's connections close, an NCCL one is aborted).
"""
from __future__ import annotations

import logging
import os

import torch

from kubellm.runtime.assembly import resolve_device
from kubellm.runtime.config import EngineConfig
from kubellm.runtime.core.errors import EngineDeadError
from kubellm.runtime.parallel import state as ps
from kubellm.runtime.distributed import heartbeat, rendezvous
from kubellm.runtime.distributed.executor import DistributedExecutor
from kubellm.runtime.distributed.launcher import WorkerSupervisor, run_worker_node
from kubellm.runtime.distributed.layout import layer_partition
from kubellm.runtime.distributed.pipeline import PipelineStage
from kubellm.runtime.distributed.stage import (StagePlan, agree_num_blocks, build_stage_runner,
                                               dist_backend, finish_setup, rank_device,
                                               share_from_driver)
from kubellm.runtime.distributed.trace import StageTrace

log = logging.getLogger(__name__)


class _Build:
    """What a half-done build must undo, and why it failed if a worker died."""

    def __init__(self):
        self.undo: list = []
        self.reason: str | None = None
        self.parallel: ps.ParallelState | None = None

    def worker_lost(self, reason: str) -> None:  # the watchdog thread; workers are killed
        self.reason = reason
        if self.parallel is not None:
            ps.abort(self.parallel)

    def check(self) -> None:
        if self.reason is not None:
            raise EngineDeadError(f"distributed engine failed to start: {self.reason}")


def build_driver_engine(engine_cls, config: EngineConfig, node: rendezvous.NodeEnv,
                        supervisor: WorkerSupervisor, build: _Build):
    from transformers import AutoConfig

    from kubellm.runtime import assembly as eb
    from kubellm.runtime.worker.sampler import Sampler

    layout = node.layout(0, config.tensor_parallel_size, config.pipeline_parallel_size)
    device = rank_device(config, layout)
    timeout = rendezvous.timeout_s(os.environ)
    heartbeat_timeout = heartbeat.timeout_s(os.environ)
    log.info("rank 0 of %d (TP %d x PP %d): rendezvous at %s", layout.world_size,
             layout.tp_size, layout.pp_size, node.init_method)
    store = rendezvous.join(node, 0, timeout, build.check)
    parallel = build.parallel = ps.initialize(layout, store, dist_backend(device), timeout)
    build.undo.append(ps.destroy)
    model_dir = eb.resolve_model_dir(config)
    hf_config = AutoConfig.from_pretrained(model_dir)
    tokenizer = eb.load_tokenizer(config, model_dir)
    config.max_model_len = eb.resolve_max_model_len(config, hf_config)
    plan = StagePlan.of(config, layer_partition(hf_config.num_hidden_layers, layout.pp_size,
                                                 config.pp_layer_partition))
    share_from_driver(plan, layout, parallel)
    log.info("pipeline stages hold layers %s", plan.partition)
    torch.manual_seed(config.seed)
    eos = eb.eos_token_ids(model_dir, tokenizer, hf_config)
    runner = build_stage_runner(config, layout, plan, device, eb.resolve_dtype(config, device),
                                parallel, Sampler(eos))
    build.undo.append(runner.shutdown)
    num_blocks = agree_num_blocks(config, runner, layout, parallel)
    stage = PipelineStage(runner, layout, parallel.tp_group, StageTrace.from_environ(layout))
    build.undo.append(stage.close)
    executor = DistributedExecutor(stage, runner.sampler, supervisor, parallel, timeout,
                                   heartbeat_timeout)
    engine = eb.assemble_engine(engine_cls, config, tokenizer, executor, runner, num_blocks,
                                eos, model_dir, eb.wants_graphs(config, device,
                                                                runner.backend_name))
    finish_setup(parallel)
    executor.start()
    return engine


def build_distributed_engine(engine_cls, config):
    """The engine of a TP x PP model, or — on a node other than 0 — never returns: runs
    the node's workers and exits with their status."""
    node = rendezvous.from_environ(os.environ, config.tensor_parallel_size,
                                   config.pipeline_parallel_size)
    if not node.is_driver_node:
        raise SystemExit(run_worker_node(node, config))
    ps.ensure_free()
    build = _Build()
    threads = torch.get_num_threads()
    build.undo.append(lambda: torch.set_num_threads(threads))
    supervisor = WorkerSupervisor(node, config, range(1, node.nproc_per_node),
                                  on_failure=build.worker_lost)
    build.undo.append(supervisor.kill)
    try:
        supervisor.start_watchdog()
        ps.share_cpu_cores(resolve_device(config), node.nproc_per_node)
        engine = build_driver_engine(engine_cls, config, node, supervisor, build)
    except BaseException as exc:
        for undo in reversed(build.undo):
            undo()
        if build.reason is not None and not isinstance(exc, EngineDeadError):
            raise EngineDeadError(f"distributed engine failed to start: {build.reason}") \
                from exc
        raise
    # the next engine in this process gets all the cores back
    engine.add_shutdown_hook(lambda: torch.set_num_threads(threads))
    return engine
