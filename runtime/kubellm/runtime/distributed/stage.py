"""Building one rank's part of the model, the same way on the driver and on workers.

The driver decides, and broadcasts on the control group, everything ranks must agree on:
its resolved EngineConfig and the layer partition (a StagePlan), then the KV-cache pool
size — the smallest any rank can hold, since one block id names the same slot on every
rank. Each rank loads only its stage's layers and, through the parallel layers' loaders,
only its tensor-parallel slice of each weight.
"""
from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.kernel_switches import KernelSwitches, device_capability
from kubellm.runtime.parallel import comm_timing
from kubellm.runtime.parallel import state as ps
from kubellm.runtime.distributed.layout import RankLayout
from kubellm.runtime.assembly import attention_backend, resolve_device, wants_graphs


@dataclass
class StagePlan:
    config: dict                       # the driver's resolved EngineConfig fields
    partition: list[tuple[int, int]]   # [start, end) layers of each pipeline stage

    def engine_config(self) -> EngineConfig:
        return EngineConfig(**self.config)

    @classmethod
    def of(cls, config: EngineConfig, partition) -> "StagePlan":
        return cls(asdict(config), [tuple(r) for r in partition])


def rank_device(config: EngineConfig, layout: RankLayout) -> torch.device:
    """CUDA device = local rank (one process per GPU); on CPU every rank shares it."""
    device = resolve_device(config)
    if device.type != "cuda":
        return device
    if layout.local_rank >= torch.cuda.device_count():
        raise ConfigError("tensor_parallel_size", f"local rank {layout.local_rank} needs a "
                          f"GPU but only {torch.cuda.device_count()} are visible")
    torch.cuda.set_device(layout.local_rank)
    return torch.device("cuda", layout.local_rank)


def dist_backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def share_from_driver(value, layout: RankLayout, parallel: ps.ParallelState):
    """The driver's ``value`` on every rank (others pass None)."""
    box = [value if layout.is_driver else None]
    dist.broadcast_object_list(box, src=0, group=parallel.control_group)
    return box[0]


def build_stage_runner(config: EngineConfig, layout: RankLayout, plan: StagePlan,
                       device: torch.device, dtype: torch.dtype, parallel: ps.ParallelState,
                       sampler=None):
    from kubellm.runtime.assembly import resolve_kv_cache_dtype, resolve_model_dir
    from kubellm.runtime.loading.loader import load_model
    from kubellm.runtime.loading.model_files import load_hf_config
    from kubellm.runtime.worker.model_runner import ModelRunner

    model_dir = resolve_model_dir(config)
    hf_config = load_hf_config(model_dir)
    layer_range = tuple(plan.partition[layout.pp_rank])
    # the layers keep this rank's shard and TP group; MoE layers read expert_parallel
    rank_state = dataclasses.replace(parallel, expert_parallel=config.enable_expert_parallel)
    with ps.building(rank_state):
        model = load_model(model_dir, hf_config, dtype, device, layer_range=layer_range,
                           load_format=config.load_format,
                           quantization=config.quantization,
                           quantization_group_size=config.quantization_group_size,
                           quantize_lm_head=config.quantize_lm_head)
    return ModelRunner(model, sampler, device, dtype, config.block_size,
                       attention_backend(config, device),
                       KernelSwitches.parse(config.kernel_switches,
                                            device_capability(device)),
                       resolve_kv_cache_dtype(config, dtype))


def agree_num_blocks(config: EngineConfig, runner, layout: RankLayout,
                     parallel: ps.ParallelState) -> int:
    """Every rank says how many KV blocks fit it; the driver takes the minimum and
    broadcasts it."""
    from kubellm.runtime.assembly import num_kv_blocks
    mine = num_kv_blocks(config, runner)
    gathered = [None] * layout.world_size if layout.is_driver else None
    dist.gather_object(mine, gathered, dst=0, group=parallel.control_group)
    return share_from_driver(min(gathered) if layout.is_driver else None, layout, parallel)


def capture_graphs(config: EngineConfig, runner, num_blocks: int) -> None:
    """Every rank the same decode graphs (their collectives must pair up), sized by what
    the driver's engine will allow: max_model_len, lowered to the KV pool if smaller."""
    from kubellm.runtime.assembly import choose_batch_limits
    capacity = num_blocks * config.block_size
    # as the driver's assemble_engine does, so every rank settles the same max_num_seqs
    # and graph sizes from the same facts
    config.max_model_len = min(config.max_model_len, capacity)
    sizes = choose_batch_limits(config, runner, capacity)
    if wants_graphs(config, runner.device, runner.backend_name):
        runner.capture_decode_graphs(config.max_num_seqs, config.max_model_len, sizes,
                                     config.max_num_batched_tokens)
    from kubellm.runtime.worker.compile_watch import watch_compiles_after_startup
    watch_compiles_after_startup(runner.device)   # what compiles from here on, a step waits for


def finish_setup(parallel: ps.ParallelState) -> None:
    """Every rank is built (weights, KV cache, graphs): from here on a rank that does not
    answer is lost, not slow (heartbeat.py)."""
    dist.barrier(group=parallel.control_group)


def describe_rank(runner, layout: RankLayout) -> dict:
    """What this rank holds: its place in the grid, its layers, parameter shapes and
    KV-cache shape (sharded-loading checks and debugging), and its per-step collective
    times when KUBELLM_COMM_TIMING is set (else None)."""
    model = runner.model
    first = runner.attn_layers[0] if runner.attn_layers else None
    return {"rank": layout.rank, "tp_rank": layout.tp_rank, "pp_rank": layout.pp_rank,
            "layers": [model.start_layer, model.end_layer],
            "params": {n: list(p.shape) for n, p in model.named_parameters()},
            "kv_cache_shape": list(first.k_cache.shape) if first is not None else None,
            "kv_cache_dtype": str(first.k_cache.dtype).removeprefix("torch.")
            if first is not None else None,
            "num_kv_caches": 2 * len(runner.attn_layers), "comm": comm_timing.summary()}
