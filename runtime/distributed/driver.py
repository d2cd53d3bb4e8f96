"""Assembling the engine on the driver (global rank 0) of a TP x PP group."""
from __future__ import annotations

import logging
import os

import torch

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.distributed import parallel_state as ps
from kubellm.runtime.distributed import rendezvous
from kubellm.runtime.distributed.executor import DistributedExecutor
from kubellm.runtime.distributed.launcher import WorkerSupervisor
from kubellm.runtime.distributed.layout import layer_partition
from kubellm.runtime.distributed.pipeline import PipelineStage
from kubellm.runtime.distributed.stage import (StagePlan, agree_num_blocks, build_stage_runner,
                                               dist_backend, rank_device, share_from_driver)
from kubellm.runtime.distributed.trace import StageTrace

log = logging.getLogger(__name__)


def build_driver_engine(engine_cls, config: EngineConfig, node: rendezvous.NodeEnv,
                        supervisor: WorkerSupervisor):
    from transformers import AutoConfig

    from kubellm.runtime import engine_builder as eb
    from kubellm.runtime.sampler import Sampler

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
    config.max_model_len = eb._resolve_max_model_len(config, hf_config)
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
