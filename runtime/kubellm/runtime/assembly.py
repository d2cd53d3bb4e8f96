"""What both assemblies of an engine share — the single-process one (engine/builder.py)
and the distributed driver (distributed/driver.py): resolve the model directory, device
and dtype, the tokenizer and EOS ids, the context length, size the KV-cache pool, and wire
the KV manager, scheduler and engine around an executor. Below both, so that neither
imports the other's package."""
from __future__ import annotations

import json
import logging
import os

import torch

from kubellm.runtime.config import EngineConfig, parse_graph_sizes
from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.core.kv_cache import KVCacheManager
from kubellm.runtime.core.scheduler import Scheduler
from kubellm.runtime.loading.shared_files import shared_umask
from kubellm.runtime.worker import auto_batching as ab

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_model_dir(config: EngineConfig) -> str:
    if config.model is None:
        from kubellm.runtime.loading.default_model import default_model_path
        return default_model_path()
    if os.path.isdir(config.model) or (os.path.isfile(config.model)
                                       and config.model.endswith(".gguf")):
        return config.model
    # a Hugging Face id: the local hub cache first, then the hub (unless HF_HUB_OFFLINE);
    # pods point HF_HOME at a volume so that a restart does not download again
    from huggingface_hub import snapshot_download
    from kubellm.runtime.loading.hub import WEIGHT_PATTERNS as patterns
    revision = os.environ.get("KUBELLM_REVISION") or None
    try:
        return snapshot_download(config.model, revision=revision, local_files_only=True,
                                 allow_patterns=patterns)
    except Exception:
        pass
    try:
        with shared_umask():  # the hub cache may sit on a volume other pods read
            return snapshot_download(config.model, revision=revision,
                                     allow_patterns=patterns)
    except Exception as exc:
        raise ConfigError("model", f"{config.model!r} is neither a directory nor a model "
                                   f"that could be fetched from the Hugging Face hub "
                                   f"({type(exc).__name__})") from None


def resolve_device(config: EngineConfig) -> torch.device:
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", "cuda was asked for but no CUDA device is visible")
    return torch.device(config.device)


def resolve_dtype(config: EngineConfig, device: torch.device) -> torch.dtype:
    if config.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[config.dtype]


def resolve_kv_cache_dtype(config: EngineConfig, dtype: torch.dtype) -> torch.dtype:
    """auto = the model dtype; fp8 / fp8_e4m3 = E4M3 (kernels/kv_cache_fp8.py)."""
    return dtype if config.kv_cache_dtype == "auto" else torch.float8_e4m3fn


def eos_token_ids(model_dir: str, tokenizer, hf_config) -> set[int]:
    ids = set()
    for eos in (getattr(tokenizer, "eos_token_id", None), getattr(hf_config, "eos_token_id", None)):
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    path = os.path.join(model_dir, "generation_config.json")
    if os.path.exists(path):
        with open(path) as fh:
            eos = json.load(fh).get("eos_token_id")
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return ids


def attention_backend(config: EngineConfig, device: torch.device) -> str:
    if config.attention_backend != "auto":
        return config.attention_backend
    return "triton" if device.type == "cuda" else "torch"


def wants_graphs(config: EngineConfig, device: torch.device, backend: str) -> bool:
    """Decode steps replay CUDA graphs (the Triton backend on CUDA, unless eager)."""
    return device.type == "cuda" and backend == "triton" and not config.enforce_eager


def load_tokenizer(config: EngineConfig, model_dir: str):
    if config.skip_tokenizer_init:
        return None
    from kubellm.runtime.loading.model_files import load_tokenizer_from
    return load_tokenizer_from(config.tokenizer or model_dir)


def assemble_engine(engine_cls, config: EngineConfig, tokenizer, executor, runner,
                    num_blocks: int, eos: set[int], model_dir: str,
                    capture_graphs: bool = False):
    """KV pool, scheduler and engine around ``executor``; ``runner`` is this process's
    ModelRunner (its own stage when the model spans processes), ``num_blocks`` the pool
    size every rank agreed on."""
    _warn_if_expert_parallel_unused(config, runner.model)
    runner.allocate_kv_cache(num_blocks)
    capacity = num_blocks * config.block_size
    if capacity < config.max_model_len:
        log.warning("KV pool holds %d tokens < max_model_len %d; lowering max_model_len",
                    capacity, config.max_model_len)
        config.max_model_len = capacity
    log.info("KV cache: %d blocks of %d tokens = %d tokens (%.2f GiB, %s)", num_blocks,
             config.block_size, capacity, num_blocks * runner.kv_bytes_per_block() / 2**30,
             str(runner.kv_dtype).replace("torch.", ""))
    graph_sizes = choose_batch_limits(config, runner, capacity)
    if capture_graphs:
        runner.capture_decode_graphs(config.max_num_seqs, config.max_model_len, graph_sizes,
                                     config.max_num_batched_tokens)
    from kubellm.runtime.worker.compile_watch import watch_compiles_after_startup
    watch_compiles_after_startup(runner.device)   # what compiles from here on, a step waits for
    return wire_engine(engine_cls, config, tokenizer, executor, num_blocks, eos, model_dir)


def wire_engine(engine_cls, config: EngineConfig, tokenizer, executor, num_blocks: int,
                eos: set[int], model_dir: str):
    """The KV manager, scheduler and engine around a ready executor."""
    kv = KVCacheManager(num_blocks, config.block_size, config.enable_prefix_caching)
    scheduler = Scheduler(kv, config.max_num_batched_tokens, config.max_num_seqs,
                          config.scheduling_policy, config.timeslice_steps)
    from kubellm.runtime.loading.default_model import MODEL_NAME
    name = config.model or MODEL_NAME
    return engine_cls(config, tokenizer, executor, kv, scheduler, eos, name, model_dir)


def _warn_if_expert_parallel_unused(config: EngineConfig, model) -> None:
    if not config.enable_expert_parallel:
        return
    from kubellm.runtime.layers.moe import FusedExperts
    if config.tensor_parallel_size == 1:
        log.warning("enable_expert_parallel has no effect with tensor_parallel_size=1: "
                    "every expert is in each process")
    elif config.pipeline_parallel_size == 1 and \
            not any(isinstance(m, FusedExperts) for m in model.modules()):
        log.warning("enable_expert_parallel has no effect: the model has no "
                    "mixture-of-experts layers")


def _sliding_window(hf_config) -> int | None:
    """The attention window the checkpoint was trained with, if it uses one."""
    window = getattr(hf_config, "sliding_window", None)
    if not window:
        return None
    if hf_config.model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and \
            not getattr(hf_config, "use_sliding_window", False):
        return None
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types and "sliding_attention" not in layer_types:
        return None   # a window in the config that no layer uses (dots.llm1)
    return int(window)


def resolve_max_model_len(config: EngineConfig, hf_config) -> int:
    model_max = hf_config.max_position_embeddings
    window = _sliding_window(hf_config)
    if window is not None and window < model_max:
        # our attention is full causal; within the window the two agree exactly
        log.warning("the model uses sliding-window attention (%d tokens), which kubellm "
                    "does not implement: max_model_len is capped at the window", window)
        model_max = window
    if config.max_model_len is None:
        return model_max
    if config.max_model_len > model_max:
        limit = "sliding window" if window is not None and window == model_max \
            else "max_position_embeddings"
        raise ConfigError("max_model_len", f"{config.max_model_len} exceeds the model's "
                                           f"{limit} ({model_max})")
    return config.max_model_len


def choose_step_budget(config: EngineConfig, runner) -> None:
    """Before the KV pool is sized (the memory profile runs a step of this budget): fill
    ``max_num_batched_tokens`` from the device and the model where the user set none, with
    an upper bound for ``max_num_seqs`` (settled by ``choose_batch_limits``)."""
    device, model = _batching_facts(config, runner)
    if config.max_num_batched_tokens is None:
        seqs = config.max_num_seqs or ab.choose_max_num_seqs(device, model, None)[0]
        config.max_num_batched_tokens, why = ab.choose_max_num_batched_tokens(device, model,
                                                                               seqs)
        log.info("hardware-aware batching: max_num_batched_tokens=%d (%s)",
                 config.max_num_batched_tokens, why)


def choose_batch_limits(config: EngineConfig, runner, kv_capacity_tokens: int) -> list[int]:
    """After the KV pool is sized: ``max_num_seqs`` where the user set none, logged; returns
    the CUDA graph sizes (the user's, or chosen from max_num_seqs)."""
    device, model = _batching_facts(config, runner)
    if config.max_num_seqs is None:
        config.max_num_seqs, why = ab.choose_max_num_seqs(device, model, kv_capacity_tokens)
        log.info("hardware-aware batching: max_num_seqs=%d (%s)", config.max_num_seqs, why)
    if config.max_num_batched_tokens is None:   # an engine assembled without a profile
        choose_step_budget(config, runner)
    if config.cuda_graph_sizes is not None:
        return parse_graph_sizes(config.cuda_graph_sizes)
    sizes, why = ab.choose_cuda_graph_sizes(config.max_num_seqs)
    if device.kind == "cuda":
        log.info("hardware-aware batching: CUDA graph sizes %s (%s)", sizes, why)
    return sizes


def _batching_facts(config: EngineConfig, runner):
    itemsize = torch.finfo(runner.dtype).bits // 8
    return (ab.DeviceFacts.of(runner.device),
            ab.ModelFacts.of(runner.model.args, itemsize, config.max_model_len))


def num_kv_blocks(config: EngineConfig, runner) -> int:
    choose_step_budget(config, runner)
    if config.num_kv_blocks is not None:
        return config.num_kv_blocks
    per_block = runner.kv_bytes_per_block()
    if runner.device.type == "cuda":
        from kubellm.runtime.worker.memory_profiler import cuda_kv_budget_bytes
        budget = cuda_kv_budget_bytes(runner, config)
    else:
        budget = int(config.cpu_kv_cache_gb * 2**30)
    num_blocks = budget // per_block
    if num_blocks < 2:
        raise ConfigError("gpu_memory_utilization" if runner.device.type == "cuda"
                          else "cpu_kv_cache_gb", "leaves no room for the KV cache")
    return num_blocks
