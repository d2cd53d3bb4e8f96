"""PyTorch's own int4 GEMM ("tinygemm": ``torch.ops.aten._weight_int4pack_mm``, the kernel
torchao and gpt-fast use for int4 weight-only models) on weights in our packed layout
(quant_layout.py): the peer our Triton W4A16 kernel is measured against in the same run,
and a backend the engine can choose where it is measured faster.

tinygemm dequantizes W = (code - 8) * scale + zero with scale and zero per group in bf16,
so our bias maps to zero = bias + 8 * scale (one more bf16 rounding of the zero). It needs
bf16 activations, 4-bit codes, no g_idx, group size 32..256, N a multiple of 8 and K of
16 * inner_k_tiles. On the CPU, torch has a variant that takes the codes unpacked.
"""
from __future__ import annotations

import torch

from kubellm.kernels.quant_layout import unpack_codes

GROUP_SIZES = (32, 64, 128, 256)
INNER_K_TILES = 8   # torchao's default; K must be a multiple of 16 * INNER_K_TILES


def unsupported_reason(k: int, n: int, group_size: int, bits: int, has_g_idx: bool,
                       dtype: torch.dtype) -> str | None:
    """Why tinygemm cannot run this layer, or None."""
    if bits != 4:
        return f"tinygemm takes 4-bit codes, not {bits}-bit"
    if has_g_idx:
        return "tinygemm has no act-order (g_idx) groups"
    if dtype != torch.bfloat16:
        return f"tinygemm takes bf16 activations, not {dtype}"
    if group_size not in GROUP_SIZES:
        return f"tinygemm takes group sizes {GROUP_SIZES}, not {group_size}"
    if n % 8 or k % (16 * INNER_K_TILES) or k % group_size:
        return (f"tinygemm needs N % 8 == 0 and K % {16 * INNER_K_TILES} == 0, "
                f"got K={k}, N={n}")
    return None


def repack(qweight: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor,
           group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tinygemm's packed weight, its [groups, N, 2] scales-and-zeros) from our layout."""
    codes = unpack_codes(qweight, 4).t().contiguous()   # [N, K]
    zeros = biases.float() + 8 * scales.float()
    scales_and_zeros = torch.stack([scales.float(), zeros], -1).to(torch.bfloat16)
    if codes.is_cuda:  # two codes per byte, the even K index in the high nibble
        pairs = (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)
        packed = torch.ops.aten._convert_weight_to_int4pack(pairs, INNER_K_TILES)
    else:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32),
                                                                      INNER_K_TILES)
    return packed, scales_and_zeros.contiguous()


def int4pack_mm(x: torch.Tensor, packed: torch.Tensor, scales_and_zeros: torch.Tensor,
                group_size: int) -> torch.Tensor:
    """x [M, K] bf16 @ W -> [M, N] bf16."""
    if x.is_cuda:
        return torch.ops.aten._weight_int4pack_mm(x, packed, group_size, scales_and_zeros)
    return torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group_size,
                                                      scales_and_zeros)
