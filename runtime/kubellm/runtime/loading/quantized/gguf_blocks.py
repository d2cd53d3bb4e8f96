"""GGUF (llama.cpp) weight blocks -> the common quantized layout, and plain tensors -> float.

A GGUF 2-D tensor of ``ne = [cols, rows]`` is a torch [rows, cols] = [out, in] weight whose
rows are runs of fixed-size blocks along ``in``. Per block (little-endian, fp16 d / m):
- Q4_0, 18 B / 32: d | 16 B nibbles; value j < 16 = low nibble of byte j, j + 16 = high.
  w = d * (q - 8)                          -> codes q, scale d, bias -8d
- Q4_1, 20 B / 32: d | m | nibbles as Q4_0.  w = d * q + m   -> scale d, bias m
- Q8_0, 34 B / 32: d | 32 int8.  w = d * q                   -> codes q + 128, bias -128d
- Q4_K, 144 B / 256: d | dmin | 12 B of 6-bit (scale, min) for 8 sub-blocks of 32 |
  128 B = 4 chunks of 32 B, chunk c holding sub-block 2c (low nibbles) and 2c+1 (high).
  w = d * sc * q - dmin * m                -> groups of 32: scale d*sc, bias -dmin*m
- Q6_K, 210 B / 256: 128 B low 4 bits | 64 B high 2 bits | 16 int8 scales | d; 16
  sub-blocks of 16. w = d * sc * (q - 32)  -> 8-bit codes, groups of 16, bias -32 d sc
Scales and biases are computed in fp32, where every product above is exact.
"""
from __future__ import annotations

import numpy as np
import torch

from kubellm.runtime.layers.quantization.packed import QuantizedWeight

# type name -> (bits of our codes, values per group)
QUANTIZED_TYPES = {"Q4_0": (4, 32), "Q4_1": (4, 32), "Q8_0": (8, 32), "Q4_K": (4, 32),
                   "Q6_K": (8, 16)}
FLOAT_TYPES = ("F32", "F16", "BF16")
_BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34, "Q4_K": 144, "Q6_K": 210}


def _f16(raw: torch.Tensor) -> torch.Tensor:
    """[..., 2] uint8 -> float32 [...]"""
    return raw.contiguous().view(torch.float16).squeeze(-1).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """[..., 16] bytes -> [..., 32] values: low nibbles first, then high nibbles."""
    return torch.cat([qs & 0x0F, qs >> 4], dim=-1)


def _decode(raw: torch.Tensor, kind: str):
    """[blocks, bytes] -> (codes [blocks, values], scales, biases [blocks, groups])."""
    if kind in ("Q4_0", "Q4_1"):
        d = _f16(raw[:, 0:2])
        if kind == "Q4_0":
            return _nibbles(raw[:, 2:18]), d[:, None], (-8 * d)[:, None]
        return _nibbles(raw[:, 4:20]), d[:, None], _f16(raw[:, 2:4])[:, None]
    if kind == "Q8_0":
        d = _f16(raw[:, 0:2])
        q = raw[:, 2:34].contiguous().view(torch.int8).to(torch.int16) + 128
        return q.to(torch.uint8), d[:, None], (-128 * d)[:, None]
    if kind == "Q4_K":
        d, dmin = _f16(raw[:, 0:2]), _f16(raw[:, 2:4])
        s = raw[:, 4:16].to(torch.int32)
        sc = torch.cat([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], 1)
        mn = torch.cat([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], 1)
        qs = raw[:, 16:144].reshape(-1, 4, 32)
        q = torch.stack([qs & 0x0F, qs >> 4], 2).reshape(-1, 256)
        return q, d[:, None] * sc.float(), -(dmin[:, None] * mn.float())
    if kind == "Q6_K":
        ql = raw[:, 0:128].reshape(-1, 2, 64).to(torch.int32)
        qh = raw[:, 128:192].reshape(-1, 2, 32).to(torch.int32)
        sc = raw[:, 192:208].contiguous().view(torch.int8).float()
        d = _f16(raw[:, 208:210])
        q = torch.cat([(ql[..., :32] & 0xF) | ((qh & 3) << 4),
                       (ql[..., 32:] & 0xF) | (((qh >> 2) & 3) << 4),
                       (ql[..., :32] >> 4) | (((qh >> 4) & 3) << 4),
                       (ql[..., 32:] >> 4) | (((qh >> 6) & 3) << 4)], -1)
        scale = d[:, None] * sc
        return q.reshape(-1, 256).to(torch.uint8), scale, -32 * scale
    raise ValueError(f"GGUF tensor type {kind} is not supported; supported: "
                     f"{', '.join((*QUANTIZED_TYPES, *FLOAT_TYPES))}")


def quantized_weight(data: np.ndarray, kind: str, rows: int, cols: int) -> QuantizedWeight:
    """A quantized GGUF matrix [rows = out, cols = in] in the common layout."""
    bits, group = QUANTIZED_TYPES[kind]
    raw = torch.from_numpy(np.array(data))   # a copy: the file is mapped read-only
    raw = raw.reshape(-1, _BLOCK_BYTES[kind])
    codes, scales, biases = _decode(raw, kind)
    groups = cols // group
    return QuantizedWeight(codes.reshape(rows, cols).t().contiguous().to(torch.uint8),
                           scales.reshape(rows, groups).t().contiguous(),
                           biases.reshape(rows, groups).t().contiguous(), bits, group)


def float_tensor(data: np.ndarray, kind: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Any tensor as float32 (quantized ones dequantized): embeddings, norms, the head."""
    if kind in FLOAT_TYPES:
        t = torch.from_numpy(np.array(data))
        if kind == "BF16":
            t = t.view(torch.int16).view(torch.bfloat16)
        return t.float().reshape(shape)
    rows, cols = shape
    return quantized_weight(data, kind, rows, cols).dequantize()
