"""Pure-torch dequantizers of GPTQ, AWQ (GEMM) and compressed-tensors pack-quantized
weights, written from the tools' packing code and proven against them (each equals the
weight transformers' exact CPU backends compute, to 0, on the committed checkpoints'
source tools; checkpoints/README.md). The tests use them as the weight-level reference,
independent of the runtime's readers. Each returns float32 [out_features, in_features].
"""
from __future__ import annotations

import torch

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]          # nibble slot k of an AWQ int32 holds column AWQ_ORDER[k]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]  # column c sits in nibble slot AWQ_REVERSE_ORDER[c]


def _unpack_int32(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Split each int32 into 32//bits fields, LSB first, along `dim` (field k -> index i*n+k)."""
    shifts = torch.arange(0, 32, bits, dtype=torch.int32, device=packed.device)
    p = packed.to(torch.int32).unsqueeze(-1)                    # [..., 1]
    if dim == 0:
        x = (p.transpose(0, 1) >> shifts) & ((1 << bits) - 1)   # [cols, rows, n]
        return x.reshape(packed.shape[1], -1).transpose(0, 1)   # [rows*n, cols]
    x = (p >> shifts) & ((1 << bits) - 1)                       # [rows, cols, n]
    return x.reshape(packed.shape[0], -1)                       # [rows, cols*n]


# ------------------------------------------------------------------------------- AWQ (GEMM)
def dequant_awq_gemm(qweight, qzeros, scales, bits=4, group_size=128):
    """AutoAWQ "gemm" (version GEMM) tensors.
    qweight int32 [in, out/8]  (packed along OUT, interleaved order AWQ_ORDER)
    qzeros  int32 [in/group, out/8] (same packing; stored zero, NO +1 offset)
    scales  fp16  [in/group, out]
    w[i, o] = (q[i, o] - z[i // g, o]) * s[i // g, o];  returns w.T  ([out, in]).
    """
    n = 32 // bits
    q = _unpack_int32(qweight, bits, dim=1)                     # [in, out] but slot-ordered
    z = _unpack_int32(qzeros, bits, dim=1)
    # undo the interleave: inside each group of 8 columns, slot k holds column AWQ_ORDER[k]
    inv = torch.tensor(AWQ_REVERSE_ORDER)
    idx = (torch.arange(q.shape[1]) // n) * n + inv[torch.arange(q.shape[1]) % n]
    q, z = q[:, idx], z[:, idx]
    g = torch.arange(q.shape[0]) // group_size
    w = (q - z[g]).to(torch.float32) * scales[g].to(torch.float32)
    return w.t().contiguous()


# ------------------------------------------------------------------------------- GPTQ
def dequant_gptq(qweight, qzeros, scales, g_idx=None, bits=4, group_size=128, zero_offset=1,
                 sym=True):
    """GPTQ ("gptq" / auto-gptq v1 checkpoint format, as GPTQModel saves by default).
    qweight int32 [in/8, out] (packed along IN, LSB-first: row i -> int32 row i//8, bits 4*(i%8))
    qzeros  int32 [n_groups, out/8] (packed along OUT, LSB-first, no interleave)
    scales  fp16  [n_groups, out]
    g_idx   int32 [in]  group of each input row (desc_act: not monotonic); None -> i // group
    v1 format stores zero-1 ("zero_offset=1": add 1 back); gptq_v2 stores the zero itself.
    w[i, o] = (q[i, o] - (z[g_idx[i], o] + zero_offset)) * s[g_idx[i], o]
    """
    q = _unpack_int32(qweight, bits, dim=0)                     # [in, out]
    z = _unpack_int32(qzeros, bits, dim=1) + zero_offset        # [groups, out]
    if g_idx is None:
        g_idx = torch.arange(q.shape[0]) // group_size
    g = g_idx.long()
    w = (q - z[g]).to(torch.float32) * scales[g].to(torch.float32)
    return w.t().contiguous()


# ------------------------------------------------------------------------------- compressed-tensors
def dequant_ct_pack_quantized(weight_packed, weight_scale, weight_zero_point=None,
                              weight_shape=None, bits=4, weight_g_idx=None):
    """compressed-tensors "pack-quantized" (llm-compressor W4A16 / W4A16_ASYM).
    weight_packed     int32 [out, in/8]  packed along IN, LSB-first, values stored as q+8
                      (signed int4 [-8,7] shifted to unsigned [0,15])
    weight_scale      [out, in/group] (bf16/fp16/fp32 = the model dtype)
    weight_zero_point int32 [out/8, in/group] (asym only: packed along OUT dim 0, signed q+8 too)
    weight_shape      int64 [2] = (out, in)
    w[o, i] = (q[o, i] - zp[o, i // g]) * s[o, i // g]   with q in [-8, 7]  (sym: zp = 0)
    """
    offset = 1 << (bits - 1)
    q = _unpack_int32(weight_packed, bits, dim=1) - offset       # [out, in(padded)]
    if weight_shape is not None:
        out_f, in_f = (int(v) for v in weight_shape)
        q = q[:out_f, :in_f]
    out_f, in_f = q.shape
    n_groups = weight_scale.shape[1]
    group = in_f // n_groups
    g = torch.arange(in_f) // group if weight_g_idx is None else weight_g_idx.long()
    s = weight_scale.to(torch.float32)[:, g]
    if weight_zero_point is not None:
        zp = _unpack_int32(weight_zero_point, bits, dim=0)[:out_f] - offset
        return (q - zp[:, g]).to(torch.float32) * s
    return q.to(torch.float32) * s
