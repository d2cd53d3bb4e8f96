"""Varlen causal attention for steps with prefills: the step's own keys and values come
from the projection output (contiguous rows), the context cached before the step from
the paged cache.

Query token ``i`` of sequence ``b`` (``q_len`` new tokens, ``seq_len`` in all) sits at
position ``ctx = seq_len - q_len`` plus ``i``. It sees the ``ctx`` cached keys (block table
``block_tables[b]``) and the new keys ``0..i`` of its own sequence (rows
``cu_seqlens_q[b] + j`` of ``k`` / ``v``). This is the paged kernel's result, computed
differently: a fresh prompt's keys (most of a prefill's work) are read as plain strided
rows, which the compiler can pipeline and, with ``use_tma``, load through Hopper's tensor
memory accelerator, instead of being gathered key by key through the block table.

Tiling (flash-attention 2): a program owns ``BLOCK_M`` query tokens of one query head;
keys stream in ``BLOCK_N`` tiles with an online softmax in fp32 (base-2 exponentials).
Query heads vary fastest in the grid, so the heads that share a KV head run side by side
and read its tiles from L2; the last query tiles (the most keys) start first. Only tiles
that cross the diagonal are masked.

The launch may cover a subset of a step's sequences: ``cu_seqlens_q`` holds absolute row
offsets into ``q``/``k``/``v``/``out`` and need not start at 0 (the decodes of a mixed step
go to ``paged_attention``; the prefills come here).

Tolerances against ``prefill_attention_ref``: ``TOLERANCES`` (atol, rtol) = fp32 2e-5,
fp16 3e-3, bf16 2e-2, as the paged kernel (P is rounded to the model dtype before P@V).
"""
import math
import numbers

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import (
    check_kv_cache, check_shape, check_tensor, is_interpreted, kernel_for,
)
from kubellm.kernels.paged_attention import SEQUENCE_METADATA, paged_attention_ref

_LOG2E = 1.4426950408889634
TOLERANCES = {torch.float32: (2e-5, 2e-5), torch.float16: (3e-3, 3e-3),
              torch.bfloat16: (2e-2, 2e-2)}


@triton.jit
def _online_softmax_step(acc, m_i, l_i, q, k, v, visible, scale_log2,
                         MASKED: tl.constexpr, DOT_FP32: tl.constexpr,
                         DOT_PRECISION: tl.constexpr):
    """One key tile into the running (acc, row max, row sum); k [BLOCK_N, D], v likewise."""
    if DOT_FP32:
        k = k.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2
    if MASKED:
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # a row that has seen no visible key yet keeps m = -inf: subtract 0 instead (no NaN)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(v.dtype)
    if DOT_FP32:
        p = p.to(tl.float32)
        v = v.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PRECISION)
    return acc, m_new, l_i


@triton.jit
def _context_tile(k_cache_ptr, v_cache_ptr, q_ptr, table_row, start, context_len, kv_head,
                  stride_cb, stride_ct, stride_ch, HEAD_DIM: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    """Keys and values [BLOCK_N, D] of positions start.. gathered through the pages, in
    q's dtype (an FP8 cache widened)."""
    k_pos = start + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    if MASKED:
        k_ok = k_pos < context_len
        block_id = tl.load(table_row + k_pos // BLOCK_SIZE, mask=k_ok, other=0)
    else:
        block_id = tl.load(table_row + k_pos // BLOCK_SIZE)
    # int64 before the multiply: block_id * stride overflows int32 in large pools
    kv_off = (block_id.to(tl.int64) * stride_cb + (k_pos % BLOCK_SIZE) * stride_ct
              + kv_head * stride_ch)
    if MASKED:
        k = tl.load(k_cache_ptr + kv_off[:, None] + dims[None, :], mask=k_ok[:, None], other=0.0)
        v = tl.load(v_cache_ptr + kv_off[:, None] + dims[None, :], mask=k_ok[:, None], other=0.0)
    else:
        k = tl.load(k_cache_ptr + kv_off[:, None] + dims[None, :])
        v = tl.load(v_cache_ptr + kv_off[:, None] + dims[None, :])
    return k.to(q_ptr.dtype.element_ty), v.to(q_ptr.dtype.element_ty)


# one binary for every batch: values that vary per step are not specialised on, nor is the
# alignment of the per-sequence metadata. A mixed step passes it sliced past its nd decode
# rows (seq_lens[nd:]), 4-byte aligned only when nd % 4 != 0; on the H200 (2026-12-02,
# call 7) each such new specialisation compiled while serving, 2.1-2.6 s a step stalled.
@triton.jit(do_not_specialize=["num_seqs", "stride_bt", "stride_qt", "stride_kt",
                               "stride_vt"],
            do_not_specialize_on_alignment=list(SEQUENCE_METADATA))
def _prefill_attention_kernel(
    q_ptr,             # [T, Hq, D]
    k_ptr,             # [T, Hkv, D] the step's keys (rotated)
    v_ptr,             # [T, Hkv, D]
    q_desc, k_desc, v_desc,   # 2-D tensor descriptors of q, k, v (USE_TMA), else unused
    k_cache_ptr,       # [num_blocks, BLOCK_SIZE, Hkv, D] context before the step
    v_cache_ptr,       # [num_blocks, BLOCK_SIZE, Hkv, D]
    block_tables_ptr,  # [B, max_blocks] int32
    seq_lens_ptr,      # [B] int32
    cu_seqlens_q_ptr,  # [B + 1] int32, absolute rows (may start above 0)
    out_ptr,           # [T, Hq, D]
    num_seqs,
    scale_log2,        # softmax scale * log2(e)
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_ct, stride_ch,
    stride_bt,
    stride_ot, stride_oh,
    GROUP: tl.constexpr,       # query heads per KV head
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,  # tokens per KV-cache block
    BLOCK_M: tl.constexpr,     # query tokens per program
    BLOCK_N: tl.constexpr,     # keys per tile
    USE_TMA: tl.constexpr,
    LONG: tl.constexpr,        # autotune key only: max_seqlen_q >= 2048
    DOT_FP32: tl.constexpr,    # interpreter only: numpy cannot multiply bf16
    DOT_PRECISION: tl.constexpr,
):
    head = tl.program_id(0)
    tile = tl.num_programs(1) - 1 - tl.program_id(1)   # the longest tiles first
    kv_head = head // GROUP

    # Sequence b owns tiles [(cu[b] - cu[0]) // BLOCK_M + b, ...): binary search for the
    # last b whose first tile is <= this one. No host-side index: nothing to sync.
    base = tl.load(cu_seqlens_q_ptr)
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first = (tl.load(cu_seqlens_q_ptr + mid) - base) // BLOCK_M + mid
        if first <= tile:
            lo = mid + 1
        else:
            hi = mid
    seq = lo - 1
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    local = tile - ((q_start - base) // BLOCK_M + seq)
    if local * BLOCK_M >= q_len:
        return
    context_len = tl.load(seq_lens_ptr + seq) - q_len

    rows = local * BLOCK_M + tl.arange(0, BLOCK_M)   # query index within the new tokens
    row_ok = rows < q_len
    dims = tl.arange(0, HEAD_DIM)
    if USE_TMA:
        q = q_desc.load([q_start + local * BLOCK_M, head * HEAD_DIM])
    else:
        q_off = (q_start + rows).to(tl.int64) * stride_qt + head * stride_qh
        q = tl.load(q_ptr + q_off[:, None] + dims[None, :], mask=row_ok[:, None], other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

    # 1. The cached context: every query of the step sees all of it (no causal mask);
    # whole tiles load unmasked, the last partial one masked.
    table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    num_context_full = context_len // BLOCK_N
    for j in range(0, num_context_full):
        k, v = _context_tile(k_cache_ptr, v_cache_ptr, q_ptr, table_row, j * BLOCK_N,
                             context_len, kv_head, stride_cb, stride_ct, stride_ch, HEAD_DIM, BLOCK_SIZE,
                             BLOCK_N, False)
        acc, m_i, l_i = _online_softmax_step(acc, m_i, l_i, q, k, v, row_ok[:, None],
                                             scale_log2, False, DOT_FP32, DOT_PRECISION)
    for start in range(num_context_full * BLOCK_N, context_len, BLOCK_N):
        k, v = _context_tile(k_cache_ptr, v_cache_ptr, q_ptr, table_row, start, context_len,
                             kv_head, stride_cb, stride_ct, stride_ch, HEAD_DIM, BLOCK_SIZE,
                             BLOCK_N, True)
        k_ok = start + tl.arange(0, BLOCK_N) < context_len
        acc, m_i, l_i = _online_softmax_step(acc, m_i, l_i, q, k, v, k_ok[None, :],
                                             scale_log2, True, DOT_FP32, DOT_PRECISION)

    # 2. The step's own keys: whole tiles before this tile's first query unmasked, the
    # ones that cross the diagonal masked.
    first_row = local * BLOCK_M
    end = tl.minimum(first_row + BLOCK_M, q_len)
    num_full = (first_row + 1) // BLOCK_N
    for j in range(0, num_full):
        start = j * BLOCK_N
        if USE_TMA:
            k = k_desc.load([q_start + start, kv_head * HEAD_DIM])
            v = v_desc.load([q_start + start, kv_head * HEAD_DIM])
        else:
            k_row = (q_start + start + tl.arange(0, BLOCK_N)).to(tl.int64)
            k = tl.load(k_ptr + (k_row * stride_kt + kv_head * stride_kh)[:, None] + dims[None, :])
            v = tl.load(v_ptr + (k_row * stride_vt + kv_head * stride_vh)[:, None] + dims[None, :])
        acc, m_i, l_i = _online_softmax_step(acc, m_i, l_i, q, k, v, row_ok[:, None],
                                             scale_log2, False, DOT_FP32, DOT_PRECISION)
    for start in range(num_full * BLOCK_N, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < q_len
        if USE_TMA:   # rows past the sequence are another's (masked) or zeros
            k = k_desc.load([q_start + start, kv_head * HEAD_DIM])
            v = v_desc.load([q_start + start, kv_head * HEAD_DIM])
        else:
            k_row = (q_start + cols).to(tl.int64)
            k = tl.load(k_ptr + (k_row * stride_kt + kv_head * stride_kh)[:, None] + dims[None, :],
                        mask=col_ok[:, None], other=0.0)
            v = tl.load(v_ptr + (k_row * stride_vt + kv_head * stride_vh)[:, None] + dims[None, :],
                        mask=col_ok[:, None], other=0.0)
        visible = row_ok[:, None] & col_ok[None, :] & (cols[None, :] <= rows[:, None])
        acc, m_i, l_i = _online_softmax_step(acc, m_i, l_i, q, k, v, visible,
                                             scale_log2, True, DOT_FP32, DOT_PRECISION)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    acc = acc / l_safe[:, None]
    o_off = (q_start + rows).to(tl.int64) * stride_ot + head * stride_oh
    tl.store(out_ptr + o_off[:, None] + dims[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None])


def _set_descriptor_blocks(nargs):
    """Autotune pre-hook: the descriptors' boxes follow the config's tile shape."""
    if nargs["USE_TMA"]:
        head_dim = nargs["HEAD_DIM"]
        nargs["q_desc"].block_shape = [nargs["BLOCK_M"], head_dim]
        nargs["k_desc"].block_shape = [nargs["BLOCK_N"], head_dim]
        nargs["v_desc"].block_shape = [nargs["BLOCK_N"], head_dim]


def _autotuned(kernel):
    # flash-attention-2 shapes for head dim 64-128 on Hopper; configs that do not fit
    # the shared memory are dropped by the autotuner (OutOfResources)
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s,
                             pre_hook=_set_descriptor_blocks)
               for m, n, w, s in ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3),
                                  (64, 64, 4, 3), (128, 64, 8, 4), (128, 128, 8, 2))]
    return triton.autotune(configs=configs, key=["HEAD_DIM", "GROUP", "USE_TMA", "LONG"])(kernel)


_prefill_attention_kernel_tuned = _autotuned(_prefill_attention_kernel)


def _descriptor(t: torch.Tensor, block_rows: int):
    """A 2-D descriptor over t [T, H, D] viewed as [T, H*D] (heads adjacent in a row)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    num_tokens, heads, head_dim = t.shape
    return TensorDescriptor(t, [num_tokens, heads * head_dim], [t.stride(0), 1],
                            [block_rows, head_dim])


def tma_supported(q, k, v) -> bool:
    """Tensor descriptors need 16-byte aligned bases and row strides, heads adjacent."""
    return all(t.stride(1) == t.shape[2] and t.data_ptr() % 16 == 0
               and (t.stride(0) * t.element_size()) % 16 == 0 for t in (q, k, v))


def _check_inputs(q, k, v, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q,
                  max_seqlen_q, scale, out):
    check_tensor("q", q, 3, (torch.float16, torch.bfloat16, torch.float32))
    device = q.device
    check_tensor("k", k, 3, (q.dtype,), device)
    check_tensor("v", v, 3, (q.dtype,), device)
    check_shape("v", v, k.shape)
    check_kv_cache(k_cache, v_cache, q.dtype, device)
    num_tokens, num_heads, head_dim = q.shape
    if k.shape[0] != num_tokens or k.shape[2] != head_dim:
        raise ValueError(f"k shape {tuple(k.shape)} does not match q shape {tuple(q.shape)}")
    if tuple(k_cache.shape[2:]) != tuple(k.shape[1:]):
        raise ValueError(f"k_cache heads/head_dim {tuple(k_cache.shape[2:])} do not match "
                         f"k's {tuple(k.shape[1:])}")
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise ValueError(f"head_dim must be a power of two >= 16, got {head_dim}")
    if num_heads % k.shape[1]:
        raise ValueError(f"q heads ({num_heads}) must be a multiple of KV heads ({k.shape[1]})")
    check_tensor("block_tables", block_tables, 2, (torch.int32,), device)
    num_seqs = block_tables.shape[0]
    check_tensor("seq_lens", seq_lens, 1, (torch.int32,), device)
    check_shape("seq_lens", seq_lens, (num_seqs,))
    check_tensor("cu_seqlens_q", cu_seqlens_q, 1, (torch.int32,), device)
    check_shape("cu_seqlens_q", cu_seqlens_q, (num_seqs + 1,))
    if not isinstance(max_seqlen_q, numbers.Integral) or max_seqlen_q < 1:
        raise ValueError(f"max_seqlen_q must be a positive int, got {max_seqlen_q!r}")
    if not isinstance(scale, numbers.Real) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite float, got {scale!r}")
    if out is not None:
        check_tensor("out", out, 3, (q.dtype,), device)
        check_shape("out", out, q.shape)


def prefill_attention(q, k, v, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q,
                      max_seqlen_q: int, scale: float, out=None, use_tma: bool = False):
    """Causal varlen attention of ``q`` [T, Hq, D] over each sequence's cached context and
    its new keys ``k``/``v`` [T, Hkv, D] (the same rows as q; strided views allowed, last
    dim contiguous). block_tables [B, max_blocks] int32, seq_lens [B] int32 (context
    including the new tokens), cu_seqlens_q [B+1] int32 (absolute rows; may start above
    0 to cover a subset of the step), max_seqlen_q a host int (an upper bound: picks the
    tuning bucket). ``use_tma`` loads q/k/v through tensor descriptors where their layout
    allows (``tma_supported``); otherwise plain loads. Rows of ``out`` outside the
    sequences are left as they were."""
    _check_inputs(q, k, v, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q,
                  max_seqlen_q, scale, out)
    num_tokens, num_heads, head_dim = q.shape
    num_seqs = block_tables.shape[0]
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if num_tokens == 0 or num_seqs == 0:
        return out
    use_tma = bool(use_tma) and tma_supported(q, k, v)
    interpreted = is_interpreted(_prefill_attention_kernel)
    kernel = kernel_for(_prefill_attention_kernel, q.device,
                        tuned=_prefill_attention_kernel_tuned)
    kwargs = dict(GROUP=num_heads // k.shape[1], HEAD_DIM=head_dim,
                  BLOCK_SIZE=k_cache.shape[1], USE_TMA=use_tma, LONG=max_seqlen_q >= 2048,
                  DOT_FP32=interpreted and q.dtype == torch.bfloat16,
                  DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32")
    if interpreted:   # small tiles keep CPU tests fast; the GPU autotunes
        kwargs.update(BLOCK_M=16, BLOCK_N=16)
    # boxes of 16 rows for the interpreter; the autotuner's pre-hook resizes them
    descs = [_descriptor(t, 16) for t in (q, k, v)] if use_tma else [q, k, v]

    def grid(meta):
        return (num_heads, num_tokens // meta["BLOCK_M"] + num_seqs)
    kernel[grid](
        q, k, v, *descs, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, out,
        num_seqs, float(scale) * _LOG2E,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        out.stride(0), out.stride(1), **kwargs)
    return out


def prefill_attention_ref(q, k, v, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q,
                          max_seqlen_q: int, scale: float):
    """Plain torch: write the new keys into copies of the caches (widened to q's dtype:
    the kernel reads the step's own keys unrounded even beside an FP8 cache), then the
    paged reference (rows outside the sequences are zeros)."""
    k_cache, v_cache = k_cache.to(q.dtype, copy=True), v_cache.to(q.dtype, copy=True)
    block_size = k_cache.shape[1]
    for b in range(block_tables.shape[0]):
        q_start, q_end = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        seq_len = int(seq_lens[b])
        pos = torch.arange(seq_len - (q_end - q_start), seq_len)
        blocks = block_tables[b, pos // block_size].long()
        k_cache[blocks, pos % block_size] = k[q_start:q_end]
        v_cache[blocks, pos % block_size] = v[q_start:q_end]
    base = int(cu_seqlens_q[0])
    out = torch.zeros_like(q)
    end = int(cu_seqlens_q[-1])
    out[base:end] = paged_attention_ref(q[base:end], k_cache, v_cache, block_tables, seq_lens,
                                        cu_seqlens_q - base, max_seqlen_q, scale)
    return out
