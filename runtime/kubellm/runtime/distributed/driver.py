"""Assembling the engine on the driver (global rank 0) of a TP x PP group."""
from __future__ import annotations

import logging
import os

import torch

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.parallel import state as ps
from kubellm.runtime.distributed import rendezvous
from kubellm.runtime.distributed.executor import DistributedExecutor
from kubellm.runtime.distributed.launcher import WorkerSupervisor, run_worker_node
from kubellm.runtime.distributed.layout import layer_partition
from kubellm.runtime.distributed.pipeline import PipelineStage
from kubellm.runtime.distributed.stage import (StagePlan, agree_num_blocks, build_stage_runner,
                                               dist_backend, rank_device, share_from_driver)
from kubellm.runtime.distributed.trace import StageTrace

log = logging.getLogger(__name__)


def build_driver_engine(engine_cls, config: EngineConfig, node: rendezvous.NodeEnv,
                        supervisor: WorkerSupervisor):
    from transformers import AutoConfig

    from kubellm.runtime import assembly as eb
    from kubellm.runtime.worker.sampler import Sampler

    layout = node.layout(0, config.tensor_parallel_size, config.pipeline_parallel_size)
    device = rank_device(config, layout)
    timeout = rendezvous.timeout_s(os.environ)
    log.info("rank 0 of %d (TP %d x PP %d): rendezvous at %s", layout.world_size,
             layout.tp_size, layout.pp_size, node.init_method)
    ps.share_cpu_cores(device, node.nproc_per_node)
    ps.initialize(layout, node.init_method, dist_backend(device), timeout)
    model_dir = eb.resolve_model_dir(config)
    hf_config = AutoConfig.from_pretrained(model_dir)
    tokenizer = eb.load_tokenizer(config, model_dir)
    config.max_model_len = eb.resolve_max_model_len(config, hf_config)
    plan = StagePlan.of(config, layer_partition(hf_config.num_hidden_layers, layout.pp_size,
                                                 config.pp_layer_partition))
    share_from_driver(plan, layout)
    log.info("pipeline stages hold layers %s", plan.partition)
    torch.manual_seed(config.seed)
    eos = eb.eos_token_ids(model_dir, tokenizer, hf_config)
    runner = build_stage_runner(config, layout, plan, device, eb.resolve_dtype(config, device),
                                Sampler(eos))
    num_blocks = agree_num_blocks(config, runner, layout)
    stage = PipelineStage(runner, layout, StageTrace.from_environ(layout))
    executor = DistributedExecutor(stage, runner.sampler, supervisor, timeout)
    return eb.assemble_engine(engine_cls, config, tokenizer, executor, runner, num_blocks, eos,
                              model_dir)


def build_distributed_engine(engine_cls, config):
    """The engine of a TP x PP model, or — on a node other than 0 — never returns: runs
    the node's workers and exits with their status."""
    node = rendezvous.from_environ(os.environ, config.tensor_parallel_size,
                                   config.pipeline_parallel_size)
    if not node.is_driver_node:
        raise SystemExit(run_worker_node(node, config))
    supervisor = WorkerSupervisor(node, config, range(1, node.nproc_per_node))
    supervisor.start_watchdog()
    try:
        return build_driver_engine(engine_cls, config, node, supervisor)
    except BaseException:
        supervisor.stop(grace_s=0.0)
        ps.destroy()
        raise
