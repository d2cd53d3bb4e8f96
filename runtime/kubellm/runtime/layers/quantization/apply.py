"""Turning a model's linears (built on ``meta``, nothing allocated yet) into quantized ones."""
from __future__ import annotations

import torch

from kubellm.runtime.layers.embedding import ParallelLMHead
from kubellm.runtime.layers.quantization.fp8 import Fp8LinearMethod, Fp8Spec
from kubellm.runtime.layers.quantization.linear_method import QuantizedLinearMethod
from kubellm.runtime.layers.quantization.spec import LinearQuantSpec, is_parallel_linear


def method_for(spec: LinearQuantSpec | Fp8Spec):
    return Fp8LinearMethod(spec) if isinstance(spec, Fp8Spec) else QuantizedLinearMethod(spec)


def apply_quantization(model: torch.nn.Module,
                       specs: dict[str, LinearQuantSpec | Fp8Spec]) -> int:
    """Give each named linear its quantized parameters (on the model's device, normally
    ``meta``); returns how many layers were converted. Unknown names are an error."""
    modules = dict(model.named_modules())
    for name, spec in specs.items():
        layer = modules.get(name)
        if layer is None or not (is_parallel_linear(layer) or isinstance(layer, ParallelLMHead)):
            raise ValueError(f"quantization names {name!r}, which is not a linear layer of "
                             f"{type(model).__name__}")
        method_for(spec).create_weights(layer, name)
    return len(specs)


def online_fp8_specs(model: torch.nn.Module) -> dict[str, Fp8Spec]:
    """Every parallel linear (the LM head and the embedding stay in the model dtype)."""
    return {name: Fp8Spec() for name, m in model.named_modules() if is_parallel_linear(m)}


def online_specs(model: torch.nn.Module, bits: int, group_size: int,
                 symmetric: bool = False, lm_head: bool = False) -> dict[str, LinearQuantSpec]:
    """Every parallel linear, and with ``lm_head`` the untied LM head of the last stage
    (the embedding is no linear: it stays float)."""
    spec = LinearQuantSpec(bits, group_size, False, symmetric)
    return {name: spec for name, m in model.named_modules()
            if is_parallel_linear(m) or (lm_head and isinstance(m, ParallelLMHead))}
