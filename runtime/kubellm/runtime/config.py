"""EngineConfig: every engine knob in one validated dataclass (see config_sources.py for
how defaults, YAML, KUBELLM_* env and CLI flags combine)."""
from __future__ import annotations

from dataclasses import dataclass, field

from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.kernel_switches import KernelSwitches

DTYPES = ("auto", "float32", "float16", "bfloat16")
DEVICES = ("auto", "cpu", "cuda")
POLICIES = ("fcfs", "priority", "timeslice")
ATTENTION_BACKENDS = ("auto", "torch", "triton")
LOAD_FORMATS = ("auto", "dummy")
EXECUTOR_BACKENDS = ("uni", "mp")
# vLLM's names; 4bit = group-wise int4 of a float checkpoint, quantized at load; fp8 =
# E4M3 weights with per-channel scales, quantized at load (vLLM's online fp8)
QUANTIZATION_METHODS = ("4bit", "fp8", "gptq", "awq", "compressed-tensors", "gguf")
# vLLM's names for an E4M3 cache (kernels/kubellm/kernels/kv_cache_fp8.py); E5M2 is not built
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3")


def _knob(default, help, choices=None):
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass
class EngineConfig:
    model: str | None = _knob(None, "model directory or Hugging Face id; none = the embedded "
                                    "SmolLM2-135M-Instruct")
    tokenizer: str | None = _knob(None, "tokenizer directory (default: the model's)")
    load_format: str = _knob("auto", "auto = the checkpoint's safetensors; dummy = random "
                                     "weights from config.json alone (benchmarks)", LOAD_FORMATS)
    quantization: str | None = _knob(
        None, "weight quantization; none = what the checkpoint is (its quantization_config, "
              "or a GGUF file); 4bit = quantize a float checkpoint's linear layers at load "
              "to group-wise int4; fp8 = to FP8 (E4M3) with a scale per output channel; "
              "gptq | awq | compressed-tensors | gguf = insist on that format",
        QUANTIZATION_METHODS)
    quantization_group_size: int = _knob(128, "input features sharing one scale and bias "
                                              "with quantization=4bit")
    quantize_lm_head: bool = _knob(False, "with quantization=4bit, quantize the (untied) LM "
                                          "head too; embeddings and norms always stay in "
                                          "the model dtype")
    skip_tokenizer_init: bool = _knob(False, "no tokenizer: prompts are token ids and "
                                             "outputs carry no text")
    dtype: str = _knob("auto", "weights and activations dtype; auto = bfloat16 on CUDA, "
                               "float32 on CPU", DTYPES)
    kv_cache_dtype: str = _knob("auto", "KV-cache storage; auto = the model dtype; fp8 "
                                        "(= fp8_e4m3) = FP8 E4M3 with scale 1.0, one byte "
                                        "per element: twice the tokens in the same memory",
                                KV_CACHE_DTYPES)
    device: str = _knob("auto", "where to run; auto = cuda when available", DEVICES)
    tensor_parallel_size: int = _knob(1, "processes that split every layer")
    pipeline_parallel_size: int = _knob(1, "processes that each hold a slice of the layers")
    pp_layer_partition: str | None = _knob(None, "layers per pipeline stage, e.g. 10,12,10; "
                                                 "none = an even split")
    distributed_executor_backend: str | None = _knob(
        None, "uni = the model runs in this process; mp = in worker processes (one per "
              "rank) driven from this one, also at one rank; none = uni for one rank, mp "
              "for several", EXECUTOR_BACKENDS)
    enable_expert_parallel: bool = _knob(False, "mixture-of-experts models: split the experts "
                                                "whole over the tensor-parallel ranks instead "
                                                "of splitting every expert")
    block_size: int = _knob(16, "tokens per KV-cache block")
    gpu_memory_utilization: float = _knob(0.9, "fraction of GPU memory the engine may use")
    cpu_kv_cache_gb: float = _knob(1.0, "KV-cache size on CPU, in GiB")
    num_kv_blocks: int | None = _knob(None, "override the computed KV-cache pool size")
    max_num_batched_tokens: int | None = _knob(None, "token budget of one engine step; none = "
                                                     "chosen from the device and the model "
                                                     "(logged)")
    max_num_seqs: int | None = _knob(None, "most requests running at once; none = chosen from "
                                           "the device, the model and the KV pool (logged)")
    cuda_graph_sizes: str | None = _knob(None, "batch sizes of the captured decode graphs, e.g. "
                                               "1,2,4,8,16,32; none = chosen from max_num_seqs")
    max_model_len: int | None = _knob(None, "longest prompt + output; default: the model's")
    enable_prefix_caching: bool = _knob(True, "reuse KV blocks of shared prompt prefixes")
    scheduling_policy: str = _knob("fcfs", "fcfs | priority | timeslice", POLICIES)
    timeslice_steps: int = _knob(32, "timeslice policy: steps a request runs before it "
                                     "yields its slot to a waiting one")
    attention_backend: str = _knob("auto", "auto = triton on CUDA, torch on CPU",
                                   ATTENTION_BACKENDS)
    enforce_eager: bool = _knob(False, "disable CUDA graphs")
    async_scheduling: bool = _knob(True, "plan and launch the next step while the device "
                                         "runs the current one")
    seed: int = _knob(0, "global seed for requests without their own")
    kernel_switches: str = _knob("", "kernel variants to use instead of the defaults, e.g. "
                                     "rope_kv_write,prefill_attention=on (see "
                                     "kubellm/runtime/kernel_switches.py)")
    max_logprobs: int = _knob(20, "most logprobs / prompt_logprobs a request may ask for per "
                                  "token (-1: the whole vocabulary)")
    generation_config: str = _knob("auto", "sampling defaults: auto = the model's "
                                           "generation_config.json, vllm = none, or a "
                                           "directory holding a generation_config.json")

    def __post_init__(self):
        _choice("dtype", self.dtype, DTYPES)
        _choice("kv_cache_dtype", self.kv_cache_dtype, KV_CACHE_DTYPES)
        _choice("device", self.device, DEVICES)
        _choice("scheduling_policy", self.scheduling_policy, POLICIES)
        _choice("attention_backend", self.attention_backend, ATTENTION_BACKENDS)
        _choice("load_format", self.load_format, LOAD_FORMATS)
        if self.distributed_executor_backend is not None:
            _choice("distributed_executor_backend", self.distributed_executor_backend,
                    EXECUTOR_BACKENDS)
        if self.quantization is not None:
            _choice("quantization", self.quantization, QUANTIZATION_METHODS)
        if self.quantize_lm_head and self.quantization != "4bit":
            raise ConfigError("quantize_lm_head", "applies to quantization=4bit only (a "
                              "pre-quantized checkpoint's head is as it was stored), got "
                              f"quantization={self.quantization}")
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "block_size",
                     "timeslice_steps", "quantization_group_size"):
            _positive_int(name, getattr(self, name))
        if self.quantization_group_size % 8:
            raise ConfigError("quantization_group_size", "must be a multiple of 8 (codes "
                              f"are packed 8 to a word), got {self.quantization_group_size}")
        if self.block_size & (self.block_size - 1):
            raise ConfigError("block_size", f"must be a power of two, got {self.block_size}")
        for name in ("num_kv_blocks", "max_model_len", "max_num_batched_tokens",
                     "max_num_seqs"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        world = self.tensor_parallel_size * self.pipeline_parallel_size
        if self.distributed_executor_backend == "uni" and world > 1:
            raise ConfigError("distributed_executor_backend",
                              f"uni runs the model in one process; tensor_parallel_size x "
                              f"pipeline_parallel_size = {world} processes need mp")
        if self.cuda_graph_sizes is not None:
            parse_graph_sizes(self.cuda_graph_sizes)
        if self.pp_layer_partition is not None:
            parse_partition(self.pp_layer_partition, self.pipeline_parallel_size)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError("gpu_memory_utilization",
                              f"must be in (0, 1], got {self.gpu_memory_utilization}")
        if not self.cpu_kv_cache_gb > 0:
            raise ConfigError("cpu_kv_cache_gb", f"must be > 0, got {self.cpu_kv_cache_gb}")
        if isinstance(self.max_logprobs, bool) or not isinstance(self.max_logprobs, int) \
                or self.max_logprobs < -1:
            raise ConfigError("max_logprobs", f"must be an integer >= -1, got "
                                              f"{self.max_logprobs!r}")
        if not self.generation_config:
            raise ConfigError("generation_config", "must be auto, vllm or a directory")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise ConfigError("num_kv_blocks", "must be at least 2")
        KernelSwitches.parse(self.kernel_switches, device_known=False)

    @property
    def is_multi_process(self) -> bool:
        """Whether the model runs in worker processes (distributed/), not in this one."""
        if self.distributed_executor_backend is not None:
            return self.distributed_executor_backend == "mp"
        return self.tensor_parallel_size * self.pipeline_parallel_size > 1

    @classmethod
    def from_sources(cls, cli=None, config_file=None, env=None, **kwargs) -> "EngineConfig":
        from kubellm.runtime.config_sources import resolve
        return resolve(cls, cli=cli, config_file=config_file, env=env, **kwargs)


def _choice(name, value, choices):
    if value not in choices:
        raise ConfigError(name, f"must be one of {', '.join(choices)}; got {value!r}")


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(name, f"must be a positive integer, got {value!r}")


def parse_partition(text: str, pp_size: int) -> list[int]:
    """Layer counts of "10,12,10": one positive count per pipeline stage."""
    def bad(why: str) -> ConfigError:
        return ConfigError("pp_layer_partition", f"{text!r}: {why}")
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise bad("expected comma-separated layer counts, one per stage") from None
    if len(sizes) != pp_size:
        raise bad(f"{len(sizes)} counts for pipeline_parallel_size={pp_size}")
    if min(sizes) < 1:
        raise bad("every stage needs at least one layer")
    return sizes


def parse_graph_sizes(text: str) -> list[int]:
    """Batch sizes of "1,2,4,8": sorted, distinct, positive."""
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ConfigError("cuda_graph_sizes",
                          f"{text!r}: expected comma-separated batch sizes") from None
    if not sizes or sizes[0] < 1:
        raise ConfigError("cuda_graph_sizes", f"{text!r}: batch sizes must be positive")
    return sizes
