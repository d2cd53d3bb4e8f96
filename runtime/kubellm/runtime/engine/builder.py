"""An LLMEngine from an EngineConfig: in this process (load, size the KV pool, capture
graphs), or over worker processes, one per tensor/pipeline-parallel rank
(distributed/driver.py; ``distributed_executor_backend=mp`` takes that path at one rank
too)."""
from __future__ import annotations

import logging

import torch

from kubellm.runtime.assembly import (assemble_engine, attention_backend, eos_token_ids,
                                      load_tokenizer, num_kv_blocks, resolve_device,
                                      resolve_dtype, resolve_kv_cache_dtype,
                                      resolve_max_model_len, resolve_model_dir, wants_graphs)
from kubellm.runtime.config import EngineConfig
from kubellm.runtime.kernel_switches import KernelSwitches, device_capability

log = logging.getLogger(__name__)


def build_engine(engine_cls, config: EngineConfig):
    from kubellm.runtime.loading.loader import load_model
    from kubellm.runtime.loading.model_files import load_hf_config
    from kubellm.runtime.worker.model_runner import ModelRunner
    from kubellm.runtime.worker.sampler import Sampler

    if config.is_multi_process:
        from kubellm.runtime.distributed.driver import build_distributed_engine
        return build_distributed_engine(engine_cls, config)
    model_dir = resolve_model_dir(config)
    device = resolve_device(config)
    dtype = resolve_dtype(config, device)
    hf_config = load_hf_config(model_dir)
    tokenizer = load_tokenizer(config, model_dir)
    config.max_model_len = resolve_max_model_len(config, hf_config)
    torch.manual_seed(config.seed)
    model = load_model(model_dir, hf_config, dtype, device, load_format=config.load_format,
                       quantization=config.quantization,
                       quantization_group_size=config.quantization_group_size,
                       quantize_lm_head=config.quantize_lm_head)
    eos = eos_token_ids(model_dir, tokenizer, hf_config)
    backend = attention_backend(config, device)
    switches = KernelSwitches.parse(config.kernel_switches, device_capability(device))
    log.info("kernel switches (this device's defaults, then --kernel-switches %r): %s",
             config.kernel_switches, switches.describe())
    runner = ModelRunner(model, Sampler(eos), device, dtype, config.block_size, backend,
                         switches, resolve_kv_cache_dtype(config, dtype))
    try:
        num_blocks = num_kv_blocks(config, runner)
        return assemble_engine(engine_cls, config, tokenizer, runner, runner, num_blocks, eos,
                               model_dir, wants_graphs(config, device, backend))
    except BaseException:
        runner.shutdown()  # the GPU memory goes back at once, not when the gc runs
        raise
