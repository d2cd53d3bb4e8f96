"""FP8 (E4M3) weights, quantized at load: ``quantization="fp8"``.

Each linear's weight [N, K] becomes ``weight_fp8`` (float8_e4m3fn, same shape) and one
float32 scale per output channel, ``weight_scale`` [N] = max |row| / 448 (E4M3's largest
finite value), so every row uses the format's whole range. Half the bytes of bf16.

The forward, where ``torch._scaled_mm`` runs FP8 x FP8 with row-wise scales (CUDA compute
capability 8.9+: Ada, Hopper; and the CPU): the activations are quantized per token
(each row's own scale, computed on the device, no host sync) and multiplied with FP8
tensor cores, the scales applied in the epilogue. Elsewhere (older GPUs) the layer's
weight is dequantized to the activations' dtype for each call. The CPU runs the
dequantizing path too (faster there: 13.8 against 21.4 ms for a 64 x 2048 x 2048 call on
this repository's machine); tests run the ``_scaled_mm`` one on the CPU by asking for it.

Tensor parallelism: every rank quantizes with the scales of whole checkpoint rows, so the
ranks hold exactly the single process's codes and scales, cut as the float weight is: a
column-parallel slice is whole rows; a row-parallel one (input features cut) reads the
whole tensor for its rows' maxima (the row-parallel layers, about a third of the
weights, are read once per rank), and each rank's partial sum is a part of the single
process's sum.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from kubellm.runtime.layers.linear import RowParallelLinear

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)   # 448
INV_FP8_MAX = 1.0 / FP8_MAX
_MIN_SCALE = 1e-12                      # an all-zero row or token keeps a finite scale


@dataclass(frozen=True)
class Fp8Spec:
    """Online FP8 for one linear (the only variant: per-channel weight scales)."""


def row_scales(weight: torch.Tensor) -> torch.Tensor:
    """float32 [N]: each row's max |w| / 448."""
    return (weight.float().abs().amax(dim=1) / FP8_MAX).clamp_(min=_MIN_SCALE)


@torch.no_grad()
def quantize_rows(weight: torch.Tensor, scales: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """weight float [N, K] -> (FP8 codes [N, K], float32 scales [N]); ``scales`` given:
    those (a slice of columns quantized on its whole rows' scales)."""
    w = weight.float()
    if scales is None:
        scales = row_scales(w)
    codes = (w / scales[:, None]).clamp_(-FP8_MAX, FP8_MAX).to(FP8)
    return codes, scales


def dequantize_rows(codes: torch.Tensor, scales: torch.Tensor, dtype) -> torch.Tensor:
    return (codes.to(torch.float32) * scales[:, None]).to(dtype)


def scaled_mm_runs_on(device: torch.device) -> bool:
    """Whether the FP8 x FP8 path (``torch._scaled_mm``, row-wise scales) is the one to
    take on ``device``: CUDA devices of compute capability 8.9 and later."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (FP8 codes [M, K], float32 scales [M, 1]): one scale per token, what
    the FP8 x FP8 path feeds torch._scaled_mm (and what a reference must round alike)."""
    xf = x.float()
    # times the fp32 reciprocal, not divided: torch on CUDA turns a division by a number
    # into that product and on the CPU divides (1 ulp apart at some rows, and a code
    # apart after them); written out, both devices and the Triton kernel agree
    x_scale = (xf.abs().amax(dim=1, keepdim=True) * INV_FP8_MAX).clamp_(min=_MIN_SCALE)
    return (xf / x_scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8), x_scale


def fused_quantizer():
    """quantize_activations as one Triton kernel, the same codes and scales (the
    fp8_quant_kernel switch; CUDA, or Triton's interpreter): a function to hand each
    layer once, so that the per-call path imports nothing."""
    from kubellm.kernels.fp8_quant import per_token_fp8
    return functools.partial(per_token_fp8, min_scale=_MIN_SCALE)


def fp8_linear(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor,
               use_scaled_mm: bool, quantize=quantize_activations) -> torch.Tensor:
    """x [M, K] @ (codes * scales)^T -> [M, N] in x's dtype; ``quantize`` rounds the
    activations on the FP8 x FP8 path."""
    n, k = codes.shape
    # _scaled_mm on CUDA wants K and N multiples of 16
    if use_scaled_mm and (x.device.type != "cuda" or (k % 16 == 0 and n % 16 == 0)):
        x8, x_scale = quantize(x)
        # row-wise scaling on CUDA returns bf16 only; other activation dtypes cast back
        out_dtype = torch.bfloat16 if x.is_cuda else x.dtype
        y = torch._scaled_mm(x8, codes.t(), scale_a=x_scale, scale_b=scales[None, :],
                             out_dtype=out_dtype)
        return y if y.dtype == x.dtype else y.to(x.dtype)
    return x @ dequantize_rows(codes, scales, x.dtype).t()


class Fp8LinearMethod:
    """The parameters, loader and forward of a parallel linear with FP8 weights (the
    same interface as QuantizedLinearMethod)."""

    def __init__(self, spec: Fp8Spec | None = None):
        self.spec = spec or Fp8Spec()

    def create_weights(self, layer: nn.Module, name: str) -> None:
        out_local, in_local = layer.weight.shape
        device = layer.weight.device
        del layer.weight
        layer.weight = None
        layer.weight_fp8 = nn.Parameter(torch.empty(out_local, in_local, dtype=FP8,
                                                    device=device), requires_grad=False)
        layer.weight_scale = nn.Parameter(torch.empty(out_local, dtype=torch.float32,
                                                      device=device), requires_grad=False)
        layer.quant_method = self

    def load(self, layer: nn.Module, loaded, shard_id=None) -> None:
        """``loaded``: a float tensor or lazy safetensors slice [out, in] (the whole
        checkpoint weight); quantizes and copies this rank's part of it."""
        device = layer.weight_fp8.device
        if isinstance(layer, RowParallelLinear):
            k_local = layer.in_per_rank
            start = layer.tp_rank * k_local
            whole = (loaded if isinstance(loaded, torch.Tensor) else loaded[:]).to(device)
            self._store(layer, whole[:, start:start + k_local], 0, device, row_scales(whole))
            return
        dst, size, src = layer.output_shard(shard_id)
        self._store(layer, loaded[src:src + size], dst, device)

    def load_local(self, layer: nn.Module, weight: torch.Tensor) -> None:
        """Quantize this rank's whole local weight [N_local, K_local] at once."""
        self._store(layer, weight, 0, layer.weight_fp8.device)

    def _store(self, layer, part, dst: int, device, scales=None) -> None:
        part = part[:] if not isinstance(part, torch.Tensor) else part
        if part.shape[1] != layer.weight_fp8.shape[1]:
            raise ValueError(f"checkpoint weight has {part.shape[1]} input features, the "
                             f"layer {layer.weight_fp8.shape[1]}")
        codes, scales = quantize_rows(part.to(device), scales)
        rows = slice(dst, dst + codes.shape[0])
        layer.weight_fp8.data[rows].copy_(codes)
        layer.weight_scale.data[rows].copy_(scales)

    def apply(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """x [..., K_local] -> [..., N_local] (no bias, no reduction)."""
        flat = x.reshape(-1, x.shape[-1])
        use = getattr(layer, "fp8_scaled_mm", None)
        if use is None:   # decided once per layer: the device does not change
            use = layer.fp8_scaled_mm = scaled_mm_runs_on(layer.weight_fp8.device)
        y = fp8_linear(flat if flat.stride(-1) == 1 else flat.contiguous(),
                       layer.weight_fp8, layer.weight_scale, use,
                       getattr(layer, "fp8_quantize", quantize_activations))
        return y.reshape(*x.shape[:-1], y.shape[-1])
