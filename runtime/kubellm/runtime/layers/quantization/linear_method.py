"""The parameters, loader and forward of a quantized parallel linear.

Each rank holds its slice in the common layout (kubellm.kernels.quant_layout):
``qweight`` int32 [K_local / PACK, N_local], ``scales`` / ``biases`` [groups, N_local] in
the model's dtype, and ``g_idx`` int32 [K_local] for act-order checkpoints. A
column-parallel slice cuts output features (any count); a row-parallel slice cuts input
features and must hold whole groups (act-order weights keep every group's scales instead).
The loader takes either a float checkpoint tensor (online quantization of this rank's
slice, on the target device) or a ``QuantizedWeight`` from a format reader.
"""
from __future__ import annotations

import torch
from torch import nn

from kubellm.kernels.quant_layout import codes_per_word, pack_codes
from kubellm.runtime.layers.quantization.cpu_dequant import dequantize_reusing
from kubellm.runtime.layers.linear import RowParallelLinear
from kubellm.runtime.layers.quantization.packed import QuantizedWeight
from kubellm.runtime.layers.quantization.rtn import REFIT_ROUNDS, quantize_rtn
from kubellm.runtime.layers.quantization.spec import LinearQuantSpec

PARAM_NAMES = ("qweight", "scales", "biases", "g_idx")
# tinygemm won at 1 and 4 rows on every Llama-3-8B projection and lost at 16 and 64 on
# every one (H200, benchmarks/results/gpu-h200-2026-12-01c: w4a16_kernel.json); the 4-bit
# engine with it decoded batch 8 at 0.91x of the engine without it
TINYGEMM_MAX_ROWS = 4


class QuantizationLayoutError(ValueError):
    """A quantized layer cannot be split the way the parallel layout asks."""


class QuantizedLinearMethod:
    def __init__(self, spec: LinearQuantSpec):
        self.spec = spec
        self.loaded_g_idx = False

    def create_weights(self, layer: nn.Module, name: str) -> None:
        spec = self.spec
        is_row = isinstance(layer, RowParallelLinear)
        out_local, in_local = layer.weight.shape
        in_full = in_local * (layer.tp_size if is_row else 1)
        pack = codes_per_word(spec.bits)
        if in_full % spec.group_size and not spec.has_g_idx:
            raise QuantizationLayoutError(
                f"{name}: in_features={in_full} is not a multiple of the quantization "
                f"group size {spec.group_size}")
        if is_row and layer.tp_size > 1 and not spec.has_g_idx and in_local % spec.group_size:
            raise QuantizationLayoutError(
                f"{name}: tensor_parallel_size={layer.tp_size} gives each rank "
                f"{in_local} of {in_full} input features, which splits the quantization "
                f"groups of {spec.group_size}; use a tensor_parallel_size that divides "
                f"{in_full // spec.group_size} (the number of groups)")
        if in_local % pack:
            raise QuantizationLayoutError(
                f"{name}: {in_local} input features per rank do not pack into int32 words "
                f"of {pack} {spec.bits}-bit codes")
        groups = -(-in_full // spec.group_size) if spec.has_g_idx else in_local // spec.group_size
        dtype, device = layer.weight.dtype, layer.weight.device
        del layer.weight
        layer.weight = None
        new = lambda *shape, dt=dtype: nn.Parameter(  # noqa: E731
            torch.empty(*shape, dtype=dt, device=device), requires_grad=False)
        layer.qweight = new(in_local // pack, out_local, dt=torch.int32)
        layer.scales = new(groups, out_local)
        layer.biases = new(groups, out_local)
        layer.g_idx = new(in_local, dt=torch.int32) if spec.has_g_idx else None
        layer.quant_method = self

    # ---- loading -----------------------------------------------------------------------
    def load(self, layer: nn.Module, loaded, shard_id=None) -> None:
        """``loaded``: a QuantizedWeight (whole checkpoint weight) or a float tensor / lazy
        safetensors slice [out, in]; copies this rank's part of it."""
        device = layer.qweight.device
        if isinstance(layer, RowParallelLinear):
            k_local = layer.in_per_rank
            start = layer.tp_rank * k_local
            if isinstance(loaded, QuantizedWeight):
                part = self._fit(loaded).rows(start, k_local)
            else:
                part = self._quantize(loaded[:, start:start + k_local], device)
            self._store(layer, part, 0, layer.qweight.shape[1])
            return
        dst, size, src = layer.output_shard(shard_id)
        if isinstance(loaded, QuantizedWeight):
            part = self._fit(loaded).columns(src, size)
        else:
            part = self._quantize(loaded[src:src + size], device)
        self._store(layer, part, dst, size)

    def load_local(self, layer: nn.Module, weight) -> None:
        """Quantize (or take) this rank's whole local weight [N_local, K_local] at once:
        re-quantizing a layer already in memory, as the quality measurements do."""
        part = self._fit(weight) if isinstance(weight, QuantizedWeight) else \
            self._quantize(weight, layer.qweight.device)
        self._store(layer, part, 0, layer.qweight.shape[1])

    def _fit(self, weight: QuantizedWeight) -> QuantizedWeight:
        if weight.bits > self.spec.bits:
            raise ValueError(f"{weight.bits}-bit codes do not fit a {self.spec.bits}-bit layer")
        return weight.regrouped(self.spec.group_size) if weight.g_idx is None else weight

    def _quantize(self, tensor, device) -> QuantizedWeight:
        w = tensor[:] if not isinstance(tensor, torch.Tensor) else tensor
        return quantize_rtn(w.to(device), self.spec.bits, self.spec.group_size,
                            self.spec.symmetric, REFIT_ROUNDS)

    def _store(self, layer, part: QuantizedWeight, dst: int, size: int) -> None:
        cols = slice(dst, dst + size)
        if part.codes.shape[0] != layer.qweight.shape[0] * codes_per_word(self.spec.bits):
            raise ValueError(f"checkpoint weight has {part.codes.shape[0]} input features, "
                             f"the layer {layer.qweight.shape[0] * codes_per_word(self.spec.bits)}")
        device = layer.qweight.device
        layer.qweight.data[:, cols].copy_(pack_codes(part.codes.to(device), self.spec.bits))
        layer.scales.data[:, cols].copy_(part.scales)
        layer.biases.data[:, cols].copy_(part.biases)
        if layer.g_idx is not None:
            g_idx = part.g_idx.to(device=device, dtype=torch.int32)
            if self.loaded_g_idx and not torch.equal(layer.g_idx.data, g_idx):
                raise ValueError("the parts of a fused layer (q/k/v or gate/up) carry "
                                 "different act-order g_idx; kubellm needs them equal")
            layer.g_idx.data.copy_(g_idx)
            self.loaded_g_idx = True

    # ---- forward -----------------------------------------------------------------------
    def add_tinygemm(self, layer: nn.Module) -> str | None:
        """Give ``layer`` a tinygemm copy of its weights for calls of at most
        TINYGEMM_MAX_ROWS rows (the w4a16_tinygemm switch); why not, or None."""
        from kubellm.kernels import tinygemm
        k, n = layer.qweight.shape[0] * codes_per_word(self.spec.bits), layer.qweight.shape[1]
        why = tinygemm.unsupported_reason(k, n, self.spec.group_size, self.spec.bits,
                                          layer.g_idx is not None, layer.scales.dtype)
        if why is None:
            layer.tinygemm = tinygemm.repack(layer.qweight, layer.scales, layer.biases,
                                             self.spec.group_size)
        return why

    def apply(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """x [..., K_local] -> [..., N_local] (no bias, no reduction)."""
        spec = self.spec
        flat = x.reshape(-1, x.shape[-1])
        packed = getattr(layer, "tinygemm", None)
        if packed is not None and flat.shape[0] <= TINYGEMM_MAX_ROWS:
            from kubellm.kernels.tinygemm import int4pack_mm
            y = int4pack_mm(flat.contiguous(), *packed, spec.group_size)
        elif x.is_cuda:
            from kubellm.kernels.w4a16_gemm import w4a16_gemm
            y = w4a16_gemm(flat if flat.stride(-1) == 1 else flat.contiguous(), layer.qweight,
                           layer.scales, layer.biases, spec.group_size, spec.bits, layer.g_idx)
        else:  # CPU: dequantize this layer for this call (into reused buffers), matmul
            w = dequantize_reusing(layer.qweight, layer.scales, layer.biases,
                                   spec.group_size, spec.bits, layer.g_idx, x.dtype)
            y = flat @ w
        return y.reshape(*x.shape[:-1], y.shape[-1])
