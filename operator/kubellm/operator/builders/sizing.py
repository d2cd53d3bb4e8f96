"""Default CPU and memory requests of a runtime pod, from the model and the layout.

A pod that requests only GPUs (an extended resource) is BestEffort: the first to be
evicted under node pressure, and scheduled as if it needed no CPU or memory. When the
user sets neither, each pod requests what its processes need (requests only: no CPU
limit, so tokenization bursts are not throttled; a memory limit only when the user sets
one).

A model has two sizes. Memory follows the total parameter count: a mixture-of-experts
model keeps every expert resident. Compute follows the active count, the parameters one
token goes through (the routed experts only), which sizes the CPUs of CPU pods. The
total comes from ``spec.model.parameters`` ("8B", "135M"), else from the model's name
("Qwen2.5-0.5B-Instruct", "Mixtral-8x7B", "Qwen3-30B-A3B": the total count), else it is
unknown and the layout alone decides; the active count from
``spec.model.activeParameters``, else the name's "A3B" part, else the total. Its
bytes per parameter follow the dtype, or the quantization (``spec.model.quantization``, or
a name that says GPTQ / AWQ / GGUF / 4bit: 4-bit).
"""
from __future__ import annotations

import math
import re
from typing import Any

GIB = 1024 ** 3
EMBEDDED_PARAMETERS = {"SmolLM2-135M-Instruct": 135e6}
EMBEDDED_QUANTIZATION = {"SmolLM2-135M-Instruct": "gguf"}   # its Q4_1 weights run as they are
# Bytes per parameter of a 4-bit model as the runtime holds it: linears in 4-bit codes +
# a scale and a bias per group of 128 (4.25 bits in bf16, 4.5 in fp32 on CPU), the
# embeddings and the LM head in the model dtype. On the Llama-3-8B shape that is 5.8 GB
# for 8.03B parameters on GPUs (0.72 B/param) and 8.1 GB on CPU (1.0); smaller models
# have relatively bigger embeddings, so round up.
QUANTIZED_BYTES_PER_PARAMETER = {"gpu": 0.8, "cpu": 1.1}
# FP8 weights (quantization: fp8): linears 1 byte per parameter + one float32 scale per
# output channel, embeddings and the LM head in the model dtype (bf16 on GPUs, float32 on
# CPU): 9.1 GB for the Llama-3-8B shape on GPUs (1.13 B/param), 11.2 GB on CPU (1.4)
FP8_BYTES_PER_PARAMETER = {"gpu": 1.2, "cpu": 1.5}
_QUANTIZED_NAME = re.compile(r"(?<![a-z])(gptq|awq|gguf|int4|w4a16|4bit|q4_[01k])(?![a-z])",
                             re.IGNORECASE)
_UNITS = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
# "8x7B" (experts x size), then a plain "0.5B" / "135M"; the first match wins, so
# "30B-A3B" reads as 30B (all experts are resident even if 3B are active).
_MOE = re.compile(r"(?<![\d.])(\d+)x(\d+(?:\.\d+)?)([kmbt])(?![a-z])", re.IGNORECASE)
_PLAIN = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)([kmbt])(?![a-z])", re.IGNORECASE)
# "30B-A3B": the active count of a mixture-of-experts model, after its total
_ACTIVE = re.compile(r"(?<![a-z\d.])A(\d+(?:\.\d+)?)([kmbt])(?![a-z])", re.IGNORECASE)

# GPU pods: Python, torch, the CUDA context and the tokenizer take ~4 GiB; each further
# rank process ~2 GiB; the loader reads one safetensors shard at a time through mmap
# (Hugging Face shards are <= 5 GB), whose pages are charged to the pod while it loads.
GPU_BASE_GIB, GPU_PER_PROCESS_GIB, LARGEST_SHARD_GIB = 4, 2, 5
# CPU pods hold the weights and the KV cache in host memory (the runtime's default
# --cpu-kv-cache-gb is 1), plus the same interpreter and tokenizer.
CPU_BASE_GIB, CPU_KV_CACHE_GIB = 2, 1
# CPU pods: 2 CPUs per rank, one more per further billion active parameters it computes
# (a decode step costs ~2 FLOPs per active parameter per token), at most 16 per rank
CPU_PER_RANK, CPU_PER_ACTIVE_BILLION, MAX_CPU_PER_RANK = 2, 1, 16
UNKNOWN_MODEL_GIB = 16  # CPU pods of a model whose size nobody stated


def parse_parameters(text: str) -> float | None:
    """Parameter count named in ``text`` ("8B" -> 8e9), or None."""
    if m := _MOE.search(text):
        return int(m[1]) * float(m[2]) * _UNITS[m[3].lower()]
    if m := _PLAIN.search(_ACTIVE.sub("", text)):   # "MoE-A2.7B" says nothing of the total
        return float(m[1]) * _UNITS[m[2].lower()]
    return None


def parse_active_parameters(text: str) -> float | None:
    """Active parameter count named in ``text`` ("Qwen3-30B-A3B" -> 3e9), or None."""
    if m := _ACTIVE.search(text):
        return float(m[1]) * _UNITS[m[2].lower()]
    return None


def _model_name(spec: dict[str, Any]) -> str:
    source = spec["model"]["source"]
    name = source.get("huggingFace") or source.get("pvc", {}).get("path", "")
    return name.rsplit("/", 1)[-1] if name else ""


def parameter_count(spec: dict[str, Any]) -> float | None:
    """Total parameters (every expert): what the memory holds."""
    model = spec["model"]
    if model.get("parameters"):
        return parse_parameters(model["parameters"])
    source = model["source"]
    if "embedded" in source:
        return EMBEDDED_PARAMETERS[source["embedded"]]
    name = _model_name(spec)
    return parse_parameters(name) if name else None


def active_parameter_count(spec: dict[str, Any]) -> float | None:
    """Parameters one token goes through (the routed experts of a mixture-of-experts
    model; all of a dense one): what each token costs to compute."""
    model = spec["model"]
    if model.get("activeParameters"):
        return parse_parameters(model["activeParameters"])
    stated = None if model.get("parameters") else parse_active_parameters(_model_name(spec))
    return stated if stated is not None else parameter_count(spec)


def size_errors(spec: dict[str, Any]) -> list[str]:
    """A stated active count larger than the stated total (neither can be checked by
    the API server: CEL has no parser for "30B")."""
    model = spec["model"]
    if model.get("parameters") and model.get("activeParameters"):
        total = parse_parameters(model["parameters"])
        active = parse_parameters(model["activeParameters"])
        if total is not None and active is not None and active > total:
            return [f"spec.model.activeParameters ({model['activeParameters']}) exceeds "
                    f"spec.model.parameters ({model['parameters']})"]
    return []


def cpus_per_rank(active_per_rank: float | None) -> int:
    if active_per_rank is None:
        return CPU_PER_RANK
    billions = max(0, math.ceil(active_per_rank / 1e9) - 1)
    return min(MAX_CPU_PER_RANK, CPU_PER_RANK + CPU_PER_ACTIVE_BILLION * billions)


def is_quantized(spec: dict[str, Any]) -> bool:
    """Quantized weights: stated (4-bit or fp8), embedded as such, or named so
    ("Llama-3-8B-GPTQ": 4-bit)."""
    model = spec["model"]
    if model.get("quantization"):
        return True
    source = model["source"]
    if "embedded" in source:
        return source["embedded"] in EMBEDDED_QUANTIZATION
    name = source.get("huggingFace") or source.get("pvc", {}).get("path", "")
    return bool(_QUANTIZED_NAME.search(name.rsplit("/", 1)[-1]))


def bytes_per_parameter(spec: dict[str, Any]) -> float:
    if spec["model"].get("quantization") == "fp8":
        return FP8_BYTES_PER_PARAMETER["gpu" if uses_gpus(spec) else "cpu"]
    if is_quantized(spec):
        return QUANTIZED_BYTES_PER_PARAMETER["gpu" if uses_gpus(spec) else "cpu"]
    dtype = spec["model"]["dtype"]
    if dtype == "float32" or (dtype == "auto" and not uses_gpus(spec)):
        return 4  # the runtime's auto dtype is float32 on CPU, bfloat16 on GPUs
    return 2


def uses_gpus(spec: dict[str, Any]) -> bool:
    return spec["resources"]["accelerator"] != "none"


def default_requests(spec: dict[str, Any], processes_per_pod: int,
                     pods_per_replica: int) -> dict[str, str]:
    """CPU and memory requests of one pod holding ``processes_per_pod`` ranks."""
    params = parameter_count(spec)
    weights_gib = (params * bytes_per_parameter(spec) / GIB / pods_per_replica
                   if params else None)
    if uses_gpus(spec):
        shard = LARGEST_SHARD_GIB if weights_gib is None else min(weights_gib, LARGEST_SHARD_GIB)
        memory = GPU_BASE_GIB + GPU_PER_PROCESS_GIB * (processes_per_pod - 1) + shard
        cpu = 2 + processes_per_pod
    else:
        held = UNKNOWN_MODEL_GIB if weights_gib is None else weights_gib
        memory = CPU_BASE_GIB + CPU_KV_CACHE_GIB * processes_per_pod + held
        active = active_parameter_count(spec)
        ranks = processes_per_pod * pods_per_replica
        cpu = processes_per_pod * cpus_per_rank(active / ranks if active else None)
    return {"cpu": str(cpu), "memory": f"{math.ceil(memory)}Gi"}
