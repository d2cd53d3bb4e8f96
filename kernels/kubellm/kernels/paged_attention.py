"""Varlen paged attention over a block table: prefills, prefix-cached prefills and decodes.

One kernel serves a whole batch. Query token ``i`` of sequence ``b`` sits at absolute
position ``seq_lens[b] - q_len_b + i`` and attends (causally) to keys ``0..position`` of
that sequence, read from the paged cache through ``block_tables[b]``.

Tiling: a program owns one KV head and ``BLOCK_M`` query rows, where a row is one
(query token, query head) pair of the heads that share that KV head (GQA). Packing the
group's heads into M lets a decode (one query token) still use ``tl.dot``, and each K/V
tile is read once for the whole group. Keys stream in ``BLOCK_N`` tiles with an online
softmax in fp32 (base-2 exponentials).

Split-KV (flash-decoding): with few sequences and long contexts a grid of one program per
(sequence, KV head) leaves most SMs idle, so the key range is cut into ``NUM_SPLITS``
chunks computed in parallel; each writes a normalised partial output and its log-sum-exp,
and a second kernel merges them.

Tolerances against ``paged_attention_ref`` are ``TOLERANCES`` (atol, rtol): fp32 2e-5
(ieee dots), fp16 3e-3, bf16 2e-2 -- P is rounded to the model dtype before the P@V
product, as in every flash-attention kernel, and the output is rounded once more.

An FP8 cache (kv_cache_fp8.py) is read as such and each tile widened to q's dtype before
the dot products: the reference, given the same cache, agrees within the same tolerances.
"""
import math
import numbers

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import (
    check_kv_cache, check_shape, check_tensor, is_interpreted, kernel_for,
)

_LOG2E = 1.4426950408889634
_MAX_SPLITS = 32
TOLERANCES = {torch.float32: (2e-5, 2e-5), torch.float16: (3e-3, 3e-3),
              torch.bfloat16: (2e-2, 2e-2)}


@triton.jit
def _attend_key_tiles(
    acc, m_i, l_i,    # running output [BLOCK_M, D], row max and row sum (base 2)
    q,                # [BLOCK_M, D]
    q_pos, row_ok,    # [BLOCK_M] absolute query positions, rows that hold a real query
    k_cache_ptr, v_cache_ptr,
    q_ptr,            # only its element type: the model dtype an FP8 cache widens to
    table_row,        # this sequence's block-table row
    kv_head, lo, hi, scale_log2,
    stride_cb, stride_ct, stride_ch,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,   # False: every key in [lo, hi) is visible to every row
    DOT_FP32: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Online-softmax update of (acc, m_i, l_i) over keys [lo, hi) in BLOCK_N tiles."""
    dims = tl.arange(0, HEAD_DIM)
    for start in range(lo, hi, BLOCK_N):
        k_pos = start + tl.arange(0, BLOCK_N)
        k_ok = k_pos < hi
        if MASKED:
            block_id = tl.load(table_row + k_pos // BLOCK_SIZE, mask=k_ok, other=0)
        else:
            block_id = tl.load(table_row + k_pos // BLOCK_SIZE)
        # int64 before the multiply: block_id * stride overflows int32 in large pools.
        kv_off = (block_id.to(tl.int64) * stride_cb + (k_pos % BLOCK_SIZE) * stride_ct
                  + kv_head * stride_ch)
        if MASKED:
            k = tl.load(k_cache_ptr + kv_off[:, None] + dims[None, :], mask=k_ok[:, None], other=0.0)
            v = tl.load(v_cache_ptr + kv_off[:, None] + dims[None, :], mask=k_ok[:, None], other=0.0)
        else:
            k = tl.load(k_cache_ptr + kv_off[:, None] + dims[None, :])
            v = tl.load(v_cache_ptr + kv_off[:, None] + dims[None, :])
        k = k.to(q_ptr.dtype.element_ty)   # no-op unless the cache is FP8
        v = v.to(q_ptr.dtype.element_ty)
        if DOT_FP32:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2
        if MASKED:
            visible = row_ok[:, None] & k_ok[None, :] & (k_pos[None, :] <= q_pos[:, None])
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen no visible key yet keeps m = -inf; subtract 0 instead so
        # that exp2 gives 0 rather than NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        p = p.to(v.dtype)
        if DOT_FP32:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, m_i, l_i


# one binary for every batch size and block-table width: a value-specialised variant
# (a width divisible by 16 or not) would compile mid-run when a new mix first appears
# int32 per-sequence arrays that a step may pass as slices (attention/triton_backend.py:
# the prefill rows' seq_lens[nd:]), so their alignment varies per step; the kernels do
# not specialise on it (it only affects how these few scalars are loaded)
SEQUENCE_METADATA = ("block_tables_ptr", "seq_lens_ptr", "cu_seqlens_q_ptr")


@triton.jit(do_not_specialize=["num_seqs", "stride_bt"],
            do_not_specialize_on_alignment=list(SEQUENCE_METADATA))
def _paged_attention_kernel(
    q_ptr,            # [T, Hq, D]
    k_cache_ptr,      # [num_blocks, BLOCK_SIZE, Hkv, D] q's dtype or FP8 E4M3
    v_cache_ptr,      # [num_blocks, BLOCK_SIZE, Hkv, D]
    block_tables_ptr,  # [B, max_blocks] int32
    seq_lens_ptr,     # [B] int32
    cu_seqlens_q_ptr,  # [B + 1] int32
    out_ptr,          # [T, Hq, D]                    (NUM_SPLITS == 1)
    part_out_ptr,     # [T, Hq, NUM_SPLITS, D] fp32   (NUM_SPLITS > 1)
    part_lse_ptr,     # [T, Hq, NUM_SPLITS] fp32      (NUM_SPLITS > 1)
    count_ptr,        # [>= q-blocks x Hkv] int32 zeros, left zero (LAST_MERGES)
    num_seqs,
    scale_log2,       # softmax scale * log2(e)
    stride_qt, stride_qh,
    stride_cb, stride_ct, stride_ch,
    stride_bt,
    stride_ot, stride_oh,
    GROUP: tl.constexpr,        # query heads per KV head
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,   # tokens per KV-cache block
    BLOCK_M: tl.constexpr,      # query rows per program = BLOCK_Q tokens x GROUP heads
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,      # keys per tile
    NUM_SPLITS: tl.constexpr,
    MIN_CHUNK: tl.constexpr,    # fewest keys per split (0: every sequence cut NUM_SPLITS ways)
    DECODE_ONLY: tl.constexpr,  # every sequence has at most one query token: program = seq
    QUERIES: tl.constexpr,      # serve 0: every sequence, 1: those of one query token only,
                                # 2: those of more than one only (decodes_apart)
    LAST_MERGES: tl.constexpr,  # the last split program of a q-block merges (no 2nd kernel)
    DOT_FP32: tl.constexpr,     # interpreter only: numpy cannot multiply bf16
    DOT_PRECISION: tl.constexpr,
):
    q_block = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    if DECODE_ONLY:   # one q-block per sequence, in order
        seq = q_block
    else:
        # Sequence b owns q-blocks [cu_q[b] // BLOCK_Q + b, ...): binary search for the
        # last b whose first q-block is <= q_block. No host-side index, so CUDA graphs
        # work.
        lo = 0
        hi = num_seqs
        while lo < hi:
            mid = (lo + hi) // 2
            first = tl.load(cu_seqlens_q_ptr + mid) // BLOCK_Q + mid
            if first <= q_block:
                lo = mid + 1
            else:
                hi = mid
        seq = lo - 1
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    if QUERIES == 1:
        if q_len != 1:
            return
    if QUERIES == 2:
        if q_len == 1:
            return
    if DECODE_ONLY:
        local_block = 0
    else:
        local_block = q_block - (q_start // BLOCK_Q + seq)
    if local_block * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context_len = seq_len - q_len  # tokens already cached before this step's queries

    rows = tl.arange(0, BLOCK_M)
    q_tok = local_block * BLOCK_Q + rows // GROUP
    head = kv_head * GROUP + rows % GROUP
    row_ok = (rows < BLOCK_Q * GROUP) & (q_tok < q_len)
    q_pos = context_len + q_tok
    dims = tl.arange(0, HEAD_DIM)

    # Keys this q-block can see, and this split's share of them (whole BLOCK_N tiles, at
    # least MIN_CHUNK keys): a sequence is cut into `pieces` <= NUM_SPLITS chunks.
    kv_end = context_len + tl.minimum((local_block + 1) * BLOCK_Q, q_len)
    chunk = tl.cdiv(tl.maximum(tl.cdiv(kv_end, NUM_SPLITS), MIN_CHUNK), BLOCK_N) * BLOCK_N
    pieces = tl.cdiv(kv_end, chunk)
    kv_lo = split * chunk
    kv_hi = tl.minimum(kv_lo + chunk, kv_end)
    tok = (q_start + q_tok).to(tl.int64)
    # a decode-only launch that merges in place keeps its parts by sequence: beside a
    # mixed step's prefills (decodes_apart) the parts then need rows for the sequences,
    # not for every token of the step
    part_tok = tl.zeros_like(tok) + seq if DECODE_ONLY and LAST_MERGES else tok
    part_row = (part_tok * (GROUP * tl.num_programs(1)) + head) * NUM_SPLITS + split
    if NUM_SPLITS > 1:
        if split >= pieces:   # no keys here: an empty part for the merge kernel (the
            # last piece's program merges without reading it)
            if not LAST_MERGES:
                tl.store(part_lse_ptr + part_row, tl.full([BLOCK_M], float("-inf"),
                                                          tl.float32), mask=row_ok)
            return
    q_off = tok * stride_qt + head * stride_qh
    q = tl.load(q_ptr + q_off[:, None] + dims[None, :], mask=row_ok[:, None], other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)

    # Tiles wholly at or before the block's first query position need no causal mask.
    first_pos = context_len + local_block * BLOCK_Q
    num_full = tl.maximum(tl.minimum(kv_hi, first_pos + 1) - kv_lo, 0) // BLOCK_N
    full_hi = kv_lo + num_full * BLOCK_N
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    acc, m_i, l_i = _attend_key_tiles(
        acc, m_i, l_i, q, q_pos, row_ok, k_cache_ptr, v_cache_ptr, q_ptr, table_row, kv_head,
        kv_lo, full_hi, scale_log2, stride_cb, stride_ct, stride_ch,
        HEAD_DIM, BLOCK_SIZE, BLOCK_N, False, DOT_FP32, DOT_PRECISION)
    acc, m_i, l_i = _attend_key_tiles(
        acc, m_i, l_i, q, q_pos, row_ok, k_cache_ptr, v_cache_ptr, q_ptr, table_row, kv_head,
        full_hi, kv_hi, scale_log2, stride_cb, stride_ct, stride_ch,
        HEAD_DIM, BLOCK_SIZE, BLOCK_N, True, DOT_FP32, DOT_PRECISION)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    acc = acc / l_safe[:, None]
    o_at = out_ptr + (tok * stride_ot + head * stride_oh)[:, None] + dims[None, :]
    if NUM_SPLITS == 1:
        tl.store(o_at, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
    elif pieces == 1 and LAST_MERGES:   # the whole sequence here: the output directly
        tl.store(o_at, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
    else:
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(part_lse_ptr + part_row, lse, mask=row_ok)
        tl.store(part_out_ptr + part_row[:, None] * HEAD_DIM + dims[None, :], acc,
                 mask=row_ok[:, None])
        if LAST_MERGES:
            # As split_k.sum_splits: the barrier puts every thread's stores before the
            # count, whose release publishes them; the last program's acquire and its
            # L1-skipping loads see them. No program waits, so no order can hang.
            tl.debug_barrier()
            count_at = count_ptr + q_block * tl.num_programs(1) + kv_head
            if tl.atomic_add(count_at, 1, sem="acq_rel") == pieces - 1:
                _merge_parts(part_out_ptr, part_lse_ptr, part_row - split, pieces, row_ok,
                             o_at, HEAD_DIM, BLOCK_M)
                tl.store(count_at, 0)


@triton.jit
def _merge_parts(part_out_ptr, part_lse_ptr, first_part, pieces, row_ok, o_at,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Rows' outputs from their ``pieces`` normalised parts and base-2 log-sum-exps."""
    dims = tl.arange(0, HEAD_DIM)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for piece in range(0, pieces):
        lse = tl.load(part_lse_ptr + first_part + piece, mask=row_ok, other=float("-inf"),
                      cache_modifier=".cg")
        part = tl.load(part_out_ptr + (first_part + piece)[:, None] * HEAD_DIM + dims[None, :],
                       mask=row_ok[:, None], other=0.0, cache_modifier=".cg")
        m_new = tl.maximum(m, lse)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_safe)
        weight = tl.exp2(lse - m_safe)   # a part with no visible key: lse = -inf -> 0
        acc = acc * alpha[:, None] + part * weight[:, None]
        total = total * alpha + weight
        m = m_new
    total = tl.where(total == 0.0, 1.0, total)
    tl.store(o_at, (acc / total[:, None]).to(o_at.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _merge_splits_kernel(
    part_out_ptr,   # [T, Hq, NUM_SPLITS, D] fp32
    part_lse_ptr,   # [T, Hq, NUM_SPLITS] fp32
    out_ptr,        # [T, Hq, D]
    stride_ot, stride_oh,
    NUM_SPLITS: tl.constexpr,
    SPLITS_POW2: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    row = tok * tl.num_programs(1) + head
    splits = tl.arange(0, SPLITS_POW2)
    split_ok = splits < NUM_SPLITS
    # Rows of tokens that belong to no sequence (CUDA-graph padding) were never written:
    # their values are garbage and so is their output, which nobody reads.
    lse = tl.load(part_lse_ptr + row * NUM_SPLITS + splits, mask=split_ok, other=float("-inf"))
    lse_max = tl.max(lse, 0)
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    weight = tl.exp2(lse - lse_max)  # empty splits: lse = -inf -> weight 0
    dims = tl.arange(0, HEAD_DIM)
    used = split_ok & (weight > 0.0)
    part = tl.load(part_out_ptr + (row * NUM_SPLITS + splits)[:, None] * HEAD_DIM + dims[None, :],
                   mask=used[:, None], other=0.0)
    total = tl.sum(weight, 0)
    total = tl.where(total == 0.0, 1.0, total)
    out = tl.sum(part * weight[:, None], 0) / total
    tl.store(out_ptr + tok * stride_ot + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))


# (BLOCK_N, num_warps, num_stages): tile/pipeline shapes that won somewhere in H200 runs
# (decode: 64/4/2; prefill: 32/4/2 or 64/4/3)
TILE_CONFIGS = ((32, 4, 2), (64, 4, 2), (64, 4, 3), (64, 8, 3), (128, 8, 2))
# Calls launch with one of these instead of the autotuner's choice: decode tiles (one
# query row per sequence) DECODE_CONFIG, prefill tiles PREFILL_CONFIG. The engine's first
# calls of each kind are its CUDA-graph warm-ups, whose sequences hold one key (decode)
# or no query token (mixed steps): a tuner chose there on launch overhead alone, and its
# key, which holds the partial buffers' dtype, handed a config tuned on one such call to
# every later split call. H200 (s18): DECODE_CONFIG was the best of TILE_CONFIGS or
# within 1-4% of it on every decode batch (call 59); PREFILL_CONFIG the best on every
# causal prefill of 16 x 128 to 1 x 16,384 tokens, where the configs the zero-query
# warm-ups left took 1.10-1.11x its time (call 61).
DECODE_CONFIG = (64, 4, 2)
PREFILL_CONFIG = (32, 4, 2)


def _autotuned(kernel):
    # Only where DECODE_CONFIG or PREFILL_CONFIG is None (benchmarks' "autotune"). Tuned
    # once per (head dim, tile rows, group, dtypes): the split count is left out of the
    # key so that capturing graphs for many batch sizes does not retune.
    configs = [triton.Config({"BLOCK_N": n}, num_warps=w, num_stages=s)
               for n, w, s in TILE_CONFIGS]
    return triton.autotune(configs=configs, key=["HEAD_DIM", "BLOCK_M", "GROUP"])(kernel)


_paged_attention_kernel_tuned = _autotuned(_paged_attention_kernel)
_sm_count_cache = {}


def _sm_count(device: torch.device) -> int:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _sm_count_cache:
        _sm_count_cache[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_count_cache[index]


def choose_num_kv_splits(num_seqs: int, num_kv_heads: int, max_seqlen_q: int,
                         device: torch.device) -> int:
    """Split-KV only for decode-only batches whose (sequence, KV head) programs cannot fill
    the GPU: aim for about two programs per SM in all, rounding the split count down to a
    power of two (an H200 sweep of batch 1-32 x context 1k-16k found this the fastest or
    within 10% of it). Depends on shapes alone (no device sync), so CUDA graphs can capture
    it; short sequences leave the extra splits empty and those programs exit at once."""
    if max_seqlen_q != 1 or device.type != "cuda":
        return 1
    wanted = max(1, 2 * _sm_count(device) // max(1, num_seqs * num_kv_heads))
    return min(_MAX_SPLITS, 1 << (wanted.bit_length() - 1))


# Split-KV for decode batches that fill the GPU already (``long_split``): a long-tailed
# batch's longest sequences would otherwise each be one program that streams its keys
# alone long after the others finished. Each sequence is cut into chunks of at least
# LONG_SPLIT_MIN_CHUNK keys, at most LONG_SPLITS of them; shorter sequences stay whole and
# write their output directly, and the last program of a cut one merges its parts.
# H200, Llama-3-8B heads, the chat workload's decode batches of 46-1000 sequences
# (contexts up to 3,720): 1.04-1.78x the unsplit kernel, and 1.01x on a W-like batch of
# 256 (s17 call 56, benchmarks/kernels/bench_decode_long_tail.py); chunks of 256 and 512
# lost to 1024 everywhere, 16 splits lost at 256-1000 sequences (more empty programs).
# Four splits: as fast as eight on every batch at DECODE_CONFIG (s18 call 59; 1000
# sequences: 457.6 against 469.0 us) with half the programs that find no keys
LONG_SPLITS = 4
LONG_SPLIT_MIN_CHUNK = 1024


# The long split's merge counts, one buffer per device, allocated zeroed at the first
# call and left zero by every call. Never replaced (a CUDA graph holds its pointer), so
# it is sized for any decode batch at once: MERGE_COUNTS q-blocks x KV heads (4 MiB).
MERGE_COUNTS = 1 << 20
_MERGE_COUNTS: dict[torch.device, torch.Tensor] = {}


def merge_counts(device: torch.device, needed: int) -> torch.Tensor:
    counts = _MERGE_COUNTS.get(device)
    if counts is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(  # an allocation here would belong to the graph's pool
                f"paged_attention: the long split's first call on {device} is inside a "
                "CUDA graph capture; run the same shapes once eagerly first")
        counts = _MERGE_COUNTS[device] = torch.zeros(MERGE_COUNTS, dtype=torch.int32,
                                                     device=device)
    if needed > counts.numel():
        raise ValueError(f"paged_attention: the long split counts {needed} q-blocks x KV "
                         f"heads, more than its {counts.numel()} (MERGE_COUNTS)")
    return counts


def choose_kv_split(num_seqs: int, num_kv_heads: int, max_seqlen_q: int,
                    device: torch.device, long_split: bool = False) -> tuple[int, int]:
    """(split count, fewest keys per split) for a batch, from shapes alone:
    ``choose_num_kv_splits`` where it splits; else, with ``long_split``, decode-only
    batches on CUDA get (LONG_SPLITS, LONG_SPLIT_MIN_CHUNK); else (1, 0)."""
    splits = choose_num_kv_splits(num_seqs, num_kv_heads, max_seqlen_q, device)
    if splits == 1 and long_split and max_seqlen_q == 1 and device.type == "cuda":
        return LONG_SPLITS, LONG_SPLIT_MIN_CHUNK
    return splits, 0


def _rows_per_program(max_seqlen_q: int, group: int) -> tuple:
    """(BLOCK_M, BLOCK_Q): decodes need only GROUP rows, prefills want large tiles."""
    wanted = 16 if max_seqlen_q == 1 else 64 if max_seqlen_q * group <= 64 else 128
    block_m = max(wanted, triton.next_power_of_2(group))
    return block_m, block_m // group


def _check_inputs(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, max_seqlen_q,
                  scale, out):
    check_tensor("q", q, 3, (torch.float16, torch.bfloat16, torch.float32))
    device = q.device
    check_kv_cache(k_cache, v_cache, q.dtype, device)
    num_tokens, num_heads, head_dim = q.shape
    _, _, num_kv_heads, cache_head_dim = k_cache.shape
    if cache_head_dim != head_dim:
        raise ValueError(f"k_cache head_dim {cache_head_dim} != q head_dim {head_dim}")
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise ValueError(f"head_dim must be a power of two >= 16, got {head_dim}")
    if num_kv_heads == 0 or num_heads % num_kv_heads:
        raise ValueError(f"q heads ({num_heads}) must be a multiple of KV heads ({num_kv_heads})")
    check_tensor("block_tables", block_tables, 2, (torch.int32,), device)
    num_seqs = block_tables.shape[0]
    check_tensor("seq_lens", seq_lens, 1, (torch.int32,), device)
    check_shape("seq_lens", seq_lens, (num_seqs,))
    check_tensor("cu_seqlens_q", cu_seqlens_q, 1, (torch.int32,), device)
    check_shape("cu_seqlens_q", cu_seqlens_q, (num_seqs + 1,))
    # Host numbers only (numpy scalars are fine): a tensor here would cost a device sync.
    if not isinstance(max_seqlen_q, numbers.Integral) or max_seqlen_q < 1:
        raise ValueError(f"max_seqlen_q must be a positive int, got {max_seqlen_q!r}")
    if not isinstance(scale, numbers.Real) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite float, got {scale!r}")
    if out is not None:
        check_tensor("out", out, 3, (q.dtype,), device)
        check_shape("out", out, q.shape)


def _check_config(config) -> None:
    if (not isinstance(config, tuple) or len(config) != 3
            or not all(isinstance(v, int) and v > 0 for v in config)
            or config[0] < 16 or config[0] & (config[0] - 1)):
        raise ValueError("config must be (BLOCK_N, num_warps, num_stages): positive ints, "
                         f"BLOCK_N a power of two >= 16; got {config!r}")


def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q,
                    max_seqlen_q: int, scale: float, out=None, num_kv_splits=None,
                    min_kv_chunk=None, long_split: bool = False, decode_only: bool = False,
                    config: tuple[int, int, int] | None = None, decodes_apart: bool = False,
                    decodes_apart_split: bool = False):
    """Causal varlen attention of `q` [T, Hq, D] over the paged K/V of each sequence.

    block_tables [B, max_blocks] int32, seq_lens [B] int32 (context incl. the new tokens),
    cu_seqlens_q [B+1] int32 (query start offsets), max_seqlen_q (host int: picks tile
    sizes and the split heuristic without a device sync; results are correct for any
    value >= 1). `q` and `out` may be strided views (last dim contiguous).
    `num_kv_splits` forces the split-KV path (tests, benchmarks), with `min_kv_chunk` keys
    at least per split (default 0: every sequence cut that many ways); None lets
    `choose_kv_split` decide, with `long_split` as it says. `decode_only` is the caller's
    word that no sequence has more than one query token (max_seqlen_q must be 1): each
    sequence's programs then find it without searching cu_seqlens_q. Rows of `out` for
    tokens past cu_seqlens_q[-1] hold unspecified values. On CUDA each new split count
    compiles: run every batch size once eagerly before capturing it in a CUDA graph (the
    long split's counts are allocated then too). `config` (BLOCK_N, num_warps, num_stages) overrides
    the tile config (benchmarks): by default DECODE_CONFIG when `max_seqlen_q` is 1, else
    PREFILL_CONFIG (either set to None: the autotuner's choice).
    `decodes_apart` (a batch with prefills, no forced splits or config): the sequences of
    one query token get a launch of their own with decode tiles (GROUP rows used of 16,
    not of the prefill tiles' 64-128), the others the prefill tiles; both launches find
    their sequences from cu_seqlens_q on the device, so a CUDA graph captured for one
    mix of decodes and prefills replays any other. With `decodes_apart_split` the decode
    launch also cuts its long sequences' keys as a decode-only batch of that many
    sequences would (`choose_kv_split` with `long_split`), merging in place.
    """
    _check_inputs(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, max_seqlen_q,
                  scale, out)
    num_tokens = q.shape[0]
    num_kv_heads = k_cache.shape[2]
    num_seqs = block_tables.shape[0]
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    max_seqlen_q = int(max_seqlen_q)
    forced_splits = num_kv_splits is not None
    if num_kv_splits is None:
        num_kv_splits, chosen_chunk = choose_kv_split(num_seqs, num_kv_heads, max_seqlen_q,
                                                      q.device, long_split)
        min_kv_chunk = chosen_chunk if min_kv_chunk is None else min_kv_chunk
    if not isinstance(num_kv_splits, int) or num_kv_splits < 1:
        raise ValueError(f"num_kv_splits must be a positive int, got {num_kv_splits!r}")
    min_kv_chunk = 0 if min_kv_chunk is None else min_kv_chunk
    if decode_only and max_seqlen_q != 1:
        raise ValueError(f"decode_only needs max_seqlen_q 1, got {max_seqlen_q}")
    if not isinstance(min_kv_chunk, int) or min_kv_chunk < 0:
        raise ValueError(f"min_kv_chunk must be an int >= 0, got {min_kv_chunk!r}")
    if config is not None:
        _check_config(config)
    if num_tokens == 0 or num_seqs == 0:
        return out
    if decodes_apart and max_seqlen_q > 1:
        if forced_splits or config is not None:
            raise ValueError("decodes_apart takes neither forced KV splits nor a tile config")
        splits, chunk = choose_kv_split(num_seqs, num_kv_heads, 1, q.device, long_split) \
            if decodes_apart_split else (1, 0)
        # the few-sequence split's merge kernel would cover every token's rows: merge in
        # place instead (a chunk of at least one key cuts as a chunk of 0 does)
        _launch(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, 1, scale, out,
                splits, max(chunk, 1) if splits > 1 else 0, None, decode_only=True,
                queries=1)
        _launch(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, max_seqlen_q,
                scale, out, 1, 0, None, decode_only=False, queries=2)
        return out
    _launch(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, max_seqlen_q, scale,
            out, num_kv_splits, min_kv_chunk, config, decode_only=decode_only, queries=0)
    return out


def _launch(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, max_seqlen_q: int,
            scale: float, out, num_kv_splits: int, min_kv_chunk: int, config,
            decode_only: bool, queries: int) -> None:
    """One launch of the kernel (and its merge kernel where split-KV needs one) over the
    sequences ``queries`` selects (the kernel's QUERIES)."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    num_seqs = block_tables.shape[0]
    group = num_heads // num_kv_heads
    block_m, block_q = _rows_per_program(max_seqlen_q, group)
    # the long split's last program of each q-block merges; split-KV of few sequences
    # keeps its merge kernel (up to 32 parts a row, read in one go there)
    last_merges = num_kv_splits > 1 and min_kv_chunk > 0
    if num_kv_splits > 1:
        rows = num_seqs if decode_only and last_merges else num_tokens   # the kernel's part_tok
        part_out = torch.empty((rows, num_heads, num_kv_splits, head_dim),
                               dtype=torch.float32, device=q.device)
        part_lse = torch.empty((rows, num_heads, num_kv_splits),
                               dtype=torch.float32, device=q.device)
    else:
        part_out = part_lse = out  # unused by the kernel
    interpreted = is_interpreted(_paged_attention_kernel)
    if config is None and not interpreted:   # None (benchmarks' "autotune"): the tuner's
        config = DECODE_CONFIG if max_seqlen_q == 1 else PREFILL_CONFIG
    kernel = kernel_for(_paged_attention_kernel, q.device,
                        tuned=None if config is not None else _paged_attention_kernel_tuned)
    grid = (num_seqs if decode_only else num_tokens // block_q + num_seqs, num_kv_heads,
            num_kv_splits)
    counts = merge_counts(q.device, grid[0] * grid[1]) if last_merges else seq_lens
    kwargs = dict(
        GROUP=group, HEAD_DIM=head_dim, BLOCK_SIZE=k_cache.shape[1], BLOCK_M=block_m,
        BLOCK_Q=block_q, NUM_SPLITS=num_kv_splits, MIN_CHUNK=min_kv_chunk,
        DECODE_ONLY=bool(decode_only), QUERIES=queries, LAST_MERGES=last_merges,
        DOT_FP32=interpreted and q.dtype == torch.bfloat16,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    if config is not None:
        kwargs["BLOCK_N"] = config[0]
        if not interpreted:
            kwargs.update(num_warps=config[1], num_stages=config[2])
    elif interpreted:
        kwargs["BLOCK_N"] = 16  # CUDA takes the configs above; small keeps CPU tests fast
    kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, out, part_out, part_lse,
        counts, num_seqs, float(scale) * _LOG2E,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1),
        **kwargs,
    )
    if num_kv_splits > 1 and not last_merges:
        kernel_for(_merge_splits_kernel, q.device)[(num_tokens, num_heads)](
            part_out, part_lse, out, out.stride(0), out.stride(1),
            NUM_SPLITS=num_kv_splits, SPLITS_POW2=triton.next_power_of_2(num_kv_splits),
            HEAD_DIM=head_dim,
        )


def paged_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q,
                        max_seqlen_q: int, scale: float):
    """Plain-torch reference: gather each sequence's K/V, explicit causal softmax in fp32."""
    num_tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.zeros_like(q)
    for b in range(block_tables.shape[0]):
        q_start, q_end = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        seq_len, q_len = int(seq_lens[b]), q_end - q_start
        if q_len == 0:
            continue
        num_blocks = -(-seq_len // block_size)
        blocks = block_tables[b, :num_blocks].long()
        k = k_cache[blocks].reshape(-1, num_kv_heads, head_dim)[:seq_len].float()
        v = v_cache[blocks].reshape(-1, num_kv_heads, head_dim)[:seq_len].float()
        k = k.repeat_interleave(group, dim=1)  # [S, Hq, D]
        v = v.repeat_interleave(group, dim=1)
        qb = q[q_start:q_end].float()
        scores = torch.einsum("qhd,khd->hqk", qb, k) * scale
        q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
        k_pos = torch.arange(seq_len, device=q.device)
        scores = scores.masked_fill(k_pos[None, None, :] > q_pos[None, :, None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[q_start:q_end] = torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype)
    return out
