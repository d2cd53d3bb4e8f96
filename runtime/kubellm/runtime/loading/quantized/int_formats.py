"""GPTQ, AWQ (GEMM packing) and compressed-tensors (pack-quantized) linears -> the common
layout. Each converter takes the tensors of one linear (by their suffix) and returns a
``QuantizedWeight``; bias = -zero * scale turns every integer zero point into the float
bias of the common layout, exactly in fp32.

- GPTQ (AutoGPTQ / GPTQModel, ``checkpoint_format`` gptq): ``qweight`` int32 [K/pack, N]
  packed along K, least significant first (the common layout already); ``qzeros`` int32
  [groups, N/pack] packed along N; ``scales`` [groups, N]; ``g_idx`` [K] (act order:
  rows in any group order). Version 1 stores zero - 1 (``gptq_v2`` stores the zero).
- AWQ GEMM (AutoAWQ, GPTQModel ``format=gemm``): ``qweight`` int32 [K, N/8] packed along
  N with the columns of each word interleaved: nibble slot i holds column [0, 2, 4, 6, 1,
  3, 5, 7][i]; ``qzeros`` [groups, N/8] packed the same way; ``scales`` [groups, N].
- compressed-tensors ``pack-quantized`` (llm-compressor W4A16 / W4A16_ASYM):
  ``weight_packed`` int32 [N, K/8] packed along K; codes are the signed values + 8;
  ``weight_zero_point`` int32 [N/8, groups] packed along N, also + 8; ``weight_scale``
  [N, groups]; ``weight_shape`` [2]. w = (code - zero_code) * scale.
"""
from __future__ import annotations

import torch

from kubellm.kernels.quant_layout import unpack_codes
from kubellm.runtime.layers.quantization.packed import QuantizedWeight

AWQ_SLOT_OF_COLUMN = (0, 4, 1, 5, 2, 6, 3, 7)   # inverse of the pack order 0,2,4,6,1,3,5,7


def _unpack_columns(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 [R, C/pack] packed along its columns -> [R, C] codes (slot i = column i)."""
    return unpack_codes(packed.t().contiguous(), bits).t()


def gptq(parts: dict[str, torch.Tensor], bits: int, group_size: int, zero_offset: int,
         use_g_idx: bool) -> QuantizedWeight:
    codes = unpack_codes(parts["qweight"], bits)                    # [K, N]
    zeros = _unpack_columns(parts["qzeros"], bits)[:, :codes.shape[1]].float() + zero_offset
    scales = parts["scales"].float()
    k = codes.shape[0]
    g_idx = parts.get("g_idx")
    trivial = torch.arange(k) // group_size
    if g_idx is not None and not use_g_idx and not torch.equal(g_idx.long(), trivial):
        raise ValueError("the checkpoint's g_idx reorders groups but its config says "
                         "desc_act is false")
    if use_g_idx and g_idx is None:
        g_idx = trivial
    return QuantizedWeight(codes, scales, -zeros * scales, bits, group_size,
                           g_idx.to(torch.int32) if use_g_idx else None)


def awq(parts: dict[str, torch.Tensor], bits: int, group_size: int) -> QuantizedWeight:
    if bits != 4:
        raise ValueError(f"AWQ GEMM packing is 4-bit; the checkpoint says {bits}")
    order = torch.tensor(AWQ_SLOT_OF_COLUMN)

    def columns(packed):
        slots = _unpack_columns(packed, bits)                      # [R, N] in slot order
        n = slots.shape[1]
        index = (torch.arange(n) // 8) * 8 + order[torch.arange(n) % 8]
        return slots[:, index]
    codes = columns(parts["qweight"])
    zeros = columns(parts["qzeros"]).float()
    scales = parts["scales"].float()
    return QuantizedWeight(codes.contiguous(), scales, -zeros * scales, bits, group_size)


def compressed_tensors(parts: dict[str, torch.Tensor], bits: int,
                       group_size: int | None) -> QuantizedWeight:
    out_f, in_f = (int(v) for v in parts["weight_shape"]) if "weight_shape" in parts else \
        (parts["weight_packed"].shape[0], parts["weight_packed"].shape[1] * 32 // bits)
    codes = unpack_codes(parts["weight_packed"].t().contiguous(), bits)[:in_f, :out_f]
    scales = parts["weight_scale"].float().t().contiguous()        # [groups, N]
    group = group_size or in_f                                     # strategy channel
    if "weight_zero_point" in parts:
        zeros = unpack_codes(parts["weight_zero_point"], bits)[:out_f].t().float()
    else:
        zeros = torch.full_like(scales, float(2 ** (bits - 1)))
    g_idx = parts.get("weight_g_idx")
    return QuantizedWeight(codes.contiguous(), scales, -zeros * scales, bits, group,
                           g_idx.to(torch.int32) if g_idx is not None else None)
