"""The one packed layout every quantized checkpoint format is repacked into at load.

A quantized linear y = x W (x [M, K], W [K, N]) is held as
- ``qweight`` int32 [K // PACK, N], PACK = 32 // bits codes per word: packed along K, least
  significant bits first (the code of row k sits in word k // PACK at bits bits*(k % PACK));
  codes are unsigned, 0 .. 2**bits - 1;
- ``scales``, ``biases`` [num_groups, N] (any float dtype): ``W[k, n] = code * scale[g, n] +
  bias[g, n]`` with g = k // group_size, or ``g_idx[k]`` (GPTQ act-order checkpoints).

A float bias instead of an integer zero point covers every format exactly in fp32: GPTQ,
AWQ and compressed-tensors (bias = -zero * scale), GGUF Q4_0 / Q8_0 (-8d / -128d), Q4_1
(its minimum m), Q4_K and Q6_K (sub-block scale and minimum). Packing along K keeps a
tile of K rows in few words, so the GEMM unpacks inside its K loop.
"""
from __future__ import annotations

import torch

SUPPORTED_BITS = (4, 8)


def codes_per_word(bits: int) -> int:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    return 32 // bits


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """[K, N] integer codes in [0, 2**bits) -> int32 [K // PACK, N]."""
    pack = codes_per_word(bits)
    k, n = codes.shape
    if k % pack:
        raise ValueError(f"K={k} must be a multiple of {pack} to pack {bits}-bit codes")
    shifts = torch.arange(0, 32, bits, dtype=torch.int64, device=codes.device)
    words = (codes.to(torch.int64).view(k // pack, pack, n) << shifts[None, :, None]).sum(1)
    # the top code's high bit lands on bit 31: wrap to the int32 it stands for
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.to(torch.int32)


def unpack_codes(qweight: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 [K // PACK, N] -> uint8 [K, N]."""
    pack = codes_per_word(bits)
    shifts = torch.arange(0, 32, bits, dtype=torch.int32, device=qweight.device)
    codes = (qweight.unsqueeze(1) >> shifts[None, :, None]) & ((1 << bits) - 1)
    return codes.reshape(qweight.shape[0] * pack, qweight.shape[1]).to(torch.uint8)


def group_index(k: int, group_size: int, g_idx: torch.Tensor | None, device) -> torch.Tensor:
    if g_idx is not None:
        return g_idx.long()
    return torch.arange(k, device=device) // group_size


def dequantize(qweight: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor,
               group_size: int, bits: int, g_idx: torch.Tensor | None = None,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """W [K, N] in ``dtype``, computed in fp32 (exact for every format's codes)."""
    codes = unpack_codes(qweight, bits)
    k = codes.shape[0]
    if g_idx is None and k % group_size == 0:  # no gather: broadcast one row per group
        w = torch.addcmul(biases.float().unsqueeze(1),
                          codes.view(k // group_size, group_size, -1).float(),
                          scales.float().unsqueeze(1))
        return w.view(k, -1).to(dtype)
    g = group_index(k, group_size, g_idx, codes.device)
    return torch.addcmul(biases.float()[g], codes.float(), scales.float()[g]).to(dtype)
