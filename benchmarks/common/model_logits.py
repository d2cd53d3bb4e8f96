"""Our model's logits for one prompt, straight through the loader and one prefill forward
(no engine): what the format tests compare with transformers' logits."""
from __future__ import annotations

import math

import torch

from kubellm.runtime.attention import torch_backend
from kubellm.runtime.attention.metadata import AttentionMetadata, set_metadata
from kubellm.runtime.layers.attention import Attention
from kubellm.runtime.loading.loader import load_model
from kubellm.runtime.loading.model_files import load_hf_config


def load(path: str, **kwargs) -> torch.nn.Module:
    return load_model(path, load_hf_config(path), torch.float32, torch.device("cpu"), **kwargs)


@torch.inference_mode()
def prompt_logits(model: torch.nn.Module, ids: list[int],
                  kv_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """float32 [len(ids), vocab]: the logits after every prompt position. The torch
    backend reads every key and value back from the cache, so a ``kv_dtype`` of
    float8_e4m3fn rounds all of them as an FP8 KV cache does for decodes."""
    n = len(ids)
    block = 16
    blocks = -(-n // block)
    for layer in (m for m in model.modules() if isinstance(m, Attention)):
        shape = (blocks, block, layer.num_kv_heads, layer.head_dim)
        layer.k_cache = torch.zeros(shape, dtype=kv_dtype)
        layer.v_cache = torch.zeros(shape, dtype=kv_dtype)
        layer.backend = torch_backend
    meta = AttentionMetadata(
        slot_mapping=torch.arange(n), block_tables=torch.arange(blocks, dtype=torch.int32)[None],
        seq_lens=torch.tensor([n], dtype=torch.int32),
        cu_seqlens_q=torch.tensor([0, n], dtype=torch.int32), max_seqlen_q=n,
        seq_lens_cpu=[n], query_lens_cpu=[n], is_decode_only=False)
    set_metadata(meta)
    try:
        hidden, _ = model(torch.tensor(ids), torch.arange(n))
    finally:
        set_metadata(None)
    return model.compute_logits(hidden).float()


def same_positions(a: list[int], b: list[int]) -> float:
    """Fraction of positions where two greedy continuations agree."""
    return sum(x == y for x, y in zip(a, b)) / max(len(a), len(b))


def dequantize_layers(model: torch.nn.Module) -> torch.nn.Module:
    """The same model with every quantized linear replaced by its float32 dequantization
    (in place): the exact weights, without the 4-bit path."""
    from kubellm.kernels.quant_layout import dequantize
    from kubellm.runtime.layers.quantization import fp8
    for layer in model.modules():
        method = getattr(layer, "quant_method", None)
        if method is None:
            continue
        if isinstance(method, fp8.Fp8LinearMethod):
            w = fp8.dequantize_rows(layer.weight_fp8, layer.weight_scale, torch.float32).t()
            names = ("weight_fp8", "weight_scale", "fp8_scaled_mm")
        else:
            w = dequantize(layer.qweight, layer.scales, layer.biases, method.spec.group_size,
                           method.spec.bits, layer.g_idx)
            names = ("qweight", "scales", "biases", "g_idx")
        for name in names:
            if hasattr(layer, name):
                delattr(layer, name)
        del layer.weight
        layer.weight = torch.nn.Parameter(w.t().contiguous(), requires_grad=False)
        layer.quant_method = None
    return model


def quantize_layers(model: torch.nn.Module, group_size: int = 128,
                    symmetric: bool = False) -> torch.nn.Module:
    """Online 4-bit (round to nearest, per group) of every float linear, in place."""
    from kubellm.runtime.layers.quantization.linear_method import QuantizedLinearMethod
    from kubellm.runtime.layers.quantization.spec import LinearQuantSpec, is_parallel_linear
    for name, layer in list(model.named_modules()):
        if not is_parallel_linear(layer) or layer.quant_method is not None:
            continue
        weight = layer.weight.data.clone()
        method = QuantizedLinearMethod(LinearQuantSpec(4, group_size, False, symmetric))
        method.create_weights(layer, name)
        method.load_local(layer, weight)
    return model


def quantize_layers_fp8(model: torch.nn.Module, activations: bool = False) -> torch.nn.Module:
    """Online FP8 (E4M3, a scale per output channel) of every float linear, in place;
    ``activations``: the forward also rounds activations to FP8 per token
    (torch._scaled_mm, as CUDA 8.9+ runs it), else the weights alone (the CPU path)."""
    from kubellm.runtime.layers.quantization.fp8 import Fp8LinearMethod
    from kubellm.runtime.layers.quantization.spec import is_parallel_linear
    for name, layer in list(model.named_modules()):
        if not is_parallel_linear(layer) or layer.quant_method is not None:
            continue
        weight = layer.weight.data.clone()
        method = Fp8LinearMethod()
        method.create_weights(layer, name)
        method.load_local(layer, weight)
        layer.fp8_scaled_mm = activations
    return model


def kv_abs_max(model: torch.nn.Module) -> float:
    """The largest |key| or |value| the last prompt_logits call cached, over all layers."""
    return max(float(c.float().abs().max()) for m in model.modules()
               if isinstance(m, Attention) for c in (m.k_cache, m.v_cache))


@torch.inference_mode()
def perplexity(model: torch.nn.Module, ids: list[int],
               kv_dtype: torch.dtype = torch.float32) -> float:
    """exp(mean negative log-likelihood of each token after the first)."""
    logits = prompt_logits(model, ids, kv_dtype)
    nll = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]))
    return float(torch.exp(nll))


def windowed_perplexity(model, ids: list[int], window: int, hf: bool = False,
                        kv_dtype: torch.dtype = torch.float32) -> float:
    """exp(mean NLL) over consecutive windows of ``window`` tokens (the model was trained
    on that length), each scored from its own start; ``hf``: a transformers model;
    ``kv_dtype``: our model's cache (prompt_logits)."""
    total, count = 0.0, 0
    for start in range(0, len(ids) - 1, window):
        chunk = ids[start:start + window]
        if len(chunk) < 2:
            break
        if hf:
            with torch.no_grad():
                logits = model(torch.tensor([chunk])).logits[0].float()
        else:
            logits = prompt_logits(model, chunk, kv_dtype)
        total += float(torch.nn.functional.cross_entropy(
            logits[:-1], torch.tensor(chunk[1:]), reduction="sum"))
        count += len(chunk) - 1
    return math.exp(total / count)
