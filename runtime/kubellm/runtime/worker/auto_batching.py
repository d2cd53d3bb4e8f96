"""Hardware-aware batching: ``max_num_batched_tokens``, ``max_num_seqs`` and the CUDA
graph sizes chosen from the device and the model when the user sets none. Each choice
comes with the reason the engine logs. Pure arithmetic on ``DeviceFacts`` and
``ModelFacts`` (tests pass made-up devices).

The rules, and the facts they rest on:
- Token budget: a chunked-prefill step reaches the matmul peak once its smallest GEMM
  (``hidden`` output columns) has several waves of 128 x 256 tiles for every SM: 4 waves
  -> ``4 * SMs * 128 * 256 / hidden`` tokens, rounded up to a power of two, within
  [2048, 16384] (above 16k a step only adds latency: prefill is compute-bound long
  before), and its activations within 2% of the device's memory. Never below
  ``max_num_seqs``, so a decode step of every running sequence fits one step.
- Sequences: as many as the KV pool holds at ``min(max_model_len, 512)`` tokens each,
  capped at 1024 (vLLM's default on GPUs of this class; past the ridge, ~160-300 rows on
  Hopper, decode GEMMs are compute-bound and more rows add latency, not throughput,
  but a deep queue keeps batches full as requests finish), rounded down to a multiple
  of 16 (graph sizes).
- Graph sizes: powers of two up to 128 (below the ridge a step reads the weights
  whatever its rows, so padding costs almost nothing), then every 16 up to 256 and every
  32 above (at most 1/8 of a compute-bound step is padding), and ``max_num_seqs``.
- CPU: no device facts to size from; the previous fixed defaults (2048 tokens, 256
  sequences).
"""
from __future__ import annotations

from dataclasses import dataclass

CPU_TOKENS, CPU_SEQS = 2048, 256
MIN_TOKENS, MAX_TOKENS = 2048, 16384
MAX_SEQS = 1024
TOKENS_PER_SEQ = 512
ACTIVATION_SHARE = 0.02
GRAPH_RIDGE = 128


@dataclass(frozen=True)
class DeviceFacts:
    kind: str                 # "cuda" or "cpu"
    name: str = ""
    total_memory: int = 0     # bytes
    sm_count: int = 0

    @classmethod
    def of(cls, device) -> "DeviceFacts":
        import torch
        if device.type != "cuda":
            return cls("cpu", "cpu")
        props = torch.cuda.get_device_properties(device)
        return cls("cuda", props.name, props.total_memory, props.multi_processor_count)


@dataclass(frozen=True)
class ModelFacts:
    hidden_size: int
    intermediate_size: int
    qkv_size: int             # output columns of the fused q/k/v projection (this rank)
    itemsize: int             # bytes per activation element
    max_model_len: int

    @classmethod
    def of(cls, args, itemsize: int, max_model_len: int) -> "ModelFacts":
        """From the model's LlamaArgs (or anything with those fields)."""
        return cls(args.hidden_size, args.intermediate_size,
                   (args.num_heads + 2 * args.num_kv_heads) * args.head_dim, itemsize,
                   max_model_len)


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def choose_max_num_batched_tokens(device: DeviceFacts, model: ModelFacts,
                                  max_num_seqs: int) -> tuple[int, str]:
    if device.kind != "cuda":
        value = max(CPU_TOKENS, max_num_seqs)
        return value, "CPU: the fixed default"
    wanted = 4 * device.sm_count * 128 * 256 // model.hidden_size
    value = min(max(_pow2_ceil(wanted), MIN_TOKENS), MAX_TOKENS)
    why = (f"4 waves of 128x256 tiles on {device.sm_count} SMs over hidden "
           f"{model.hidden_size} = {wanted} tokens -> {value}")
    # the step's largest activations: gate/up output, q/k/v, a few hidden-sized buffers
    per_token = model.itemsize * (2 * model.intermediate_size + model.qkv_size
                                  + 4 * model.hidden_size)
    memory_cap = int(ACTIVATION_SHARE * device.total_memory) // per_token
    if value > memory_cap:
        value = max(MIN_TOKENS, 1 << (memory_cap.bit_length() - 1) if memory_cap else 0)
        why += f"; activations within 2% of {device.total_memory / 2**30:.0f} GiB -> {value}"
    if value < max_num_seqs:
        value = max_num_seqs
        why += f"; raised to max_num_seqs {max_num_seqs} (a full decode step fits)"
    return value, why


def choose_max_num_seqs(device: DeviceFacts, model: ModelFacts,
                        kv_capacity_tokens: int | None) -> tuple[int, str]:
    """``kv_capacity_tokens`` None: before the KV pool is sized (the memory profile needs
    an upper bound); the cap alone."""
    if device.kind != "cuda":
        return CPU_SEQS, "CPU: the fixed default"
    if kv_capacity_tokens is None:
        return MAX_SEQS, "the cap, until the KV pool is sized"
    per_seq = min(model.max_model_len, TOKENS_PER_SEQ)
    fits = kv_capacity_tokens // per_seq
    value = min(MAX_SEQS, fits)
    value = max(1, value - value % 16) if value >= 16 else max(1, value)
    why = (f"the KV pool's {kv_capacity_tokens} tokens hold {fits} sequences of {per_seq} "
           f"tokens; cap {MAX_SEQS} -> {value}")
    return value, why


def choose_cuda_graph_sizes(max_num_seqs: int) -> tuple[list[int], str]:
    sizes = [s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s < max_num_seqs]
    sizes += list(range(GRAPH_RIDGE + 16, min(256, max_num_seqs - 1) + 1, 16))
    sizes += list(range(288, max_num_seqs, 32))
    sizes = sorted(set(sizes + [max_num_seqs]))
    return sizes, (f"{len(sizes)} sizes: powers of two to {GRAPH_RIDGE}, then every 16 to "
                   f"256 and every 32 to {max_num_seqs}")
