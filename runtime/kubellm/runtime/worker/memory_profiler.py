"""Sizing the KV-cache pool on CUDA from memory measured after a profiling forward pass
at the largest step the scheduler can produce (``max_num_batched_tokens`` tokens and
``max_num_seqs`` rows of logits)."""
from __future__ import annotations

import logging

import torch

from kubellm.runtime.attention.metadata import AttentionMetadata, set_metadata
from kubellm.runtime.worker import auto_batching

log = logging.getLogger(__name__)

# kept free for CUDA-graph pools, the sampler's temporaries and allocator fragmentation
_HEADROOM_BYTES = 512 * 2**20


# Prompts these long take the attention kernels' short-prefill tunings: below 2,048
# tokens the paged kernel serves steps with prefills (triton_backend), in tiles of 128
# query rows, or of 64 when the longest prompt's rows times the query heads per KV head
# fit 64 (2 tokens do for up to 32 heads per KV head; a first run of each tile autotunes).
_SHORT_PREFILL = 256
_TINY_PREFILL = 2


@torch.inference_mode()
def warm_short_prefill(runner, table: torch.Tensor, max_num_batched_tokens: int = 0) -> None:
    """Forwards of a short and a tiny prompt after the profile's long one, so that the
    kernels' short-prefill variants are compiled and tuned at startup, not in the first
    requests (their autotuning compiles several configs: 5-7 s on the H200's host). Where
    a step can hold PREFILL_KERNEL_MIN_STEP_TOKENS (and the model's heads let such a step
    take the prefill kernel), one more of such a step made of prompts shorter than
    PREFILL_KERNEL_MIN_QUERY: the prefill kernel's short-prompt tuning bucket, which the
    profile's long prompts never reach."""
    for n in (_SHORT_PREFILL, _TINY_PREFILL):
        _forward_unwritten(runner, _unwritten_prompts(runner, table, [n]))
    from kubellm.runtime.attention import triton_backend
    step = triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS
    if max_num_batched_tokens >= step:
        longest = min(triton_backend.PREFILL_KERNEL_MIN_QUERY - 1,
                      table.shape[1] * runner.block_size)
        count = -(-step // longest)
        meta = _unwritten_prompts(runner, table, [-(-step // count)] * count)
        # the backend's own rule (switch, heads) says whether such a step takes it
        takes = getattr(runner.backend, "uses_prefill_kernel", None)
        layer = runner.attn_layers[0]
        if takes is not None and takes(meta, runner.switches,
                                       layer.num_heads // layer.num_kv_heads):
            _forward_unwritten(runner, meta)


def _unwritten_prompts(runner, table: torch.Tensor, lens: list[int]) -> AttentionMetadata:
    """A step of prompts of ``lens`` tokens whose keys and values go to no KV block
    (``table``: one block-table row, the same for each; no prompt reads a cached key)."""
    device = runner.device
    cu = [0]
    for length in lens:
        cu.append(cu[-1] + length)
    return AttentionMetadata(
        slot_mapping=torch.full((cu[-1],), -1, dtype=torch.int64, device=device),
        block_tables=table.repeat(len(lens), 1),
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=device),
        max_seqlen_q=max(lens), seq_lens_cpu=list(lens), query_lens_cpu=list(lens),
        is_decode_only=False)


def _forward_unwritten(runner, meta: AttentionMetadata) -> None:
    """One forward of ``_unwritten_prompts``'s step (token ids 0)."""
    device = runner.device
    positions = torch.cat([torch.arange(length, device=device)
                           for length in meta.query_lens_cpu])
    set_metadata(meta)
    try:
        runner.model(torch.zeros(positions.shape[0], dtype=torch.int64, device=device),
                     positions, None, None)
    finally:
        set_metadata(None)
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.inference_mode()
def cuda_kv_budget_bytes(runner, config) -> int:
    device = runner.device
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    num_tokens = config.max_num_batched_tokens
    seq_len = min(num_tokens, config.max_model_len)
    num_seqs = -(-num_tokens // seq_len)
    blocks_per_seq = -(-seq_len // runner.block_size)
    runner.allocate_kv_cache(num_seqs * blocks_per_seq + 1)
    query_lens = [seq_len] * (num_seqs - 1) + [num_tokens - seq_len * (num_seqs - 1)]
    cu = [0]
    for q in query_lens:
        cu.append(cu[-1] + q)
    tables = torch.arange(num_seqs * blocks_per_seq, dtype=torch.int32,
                          device=device).view(num_seqs, blocks_per_seq)
    meta = AttentionMetadata(
        slot_mapping=torch.full((num_tokens,), -1, dtype=torch.int64, device=device),
        block_tables=tables, seq_lens=torch.tensor(query_lens, dtype=torch.int32, device=device),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=device),
        max_seqlen_q=max(query_lens),
        seq_lens_cpu=query_lens, query_lens_cpu=query_lens, is_decode_only=False)
    token_ids = torch.randint(0, runner.vocab_size, (num_tokens,), device=device)
    positions = torch.cat([torch.arange(q, device=device) for q in query_lens])
    model = runner.model
    hidden = residual = None
    if not model.is_first_stage:  # a later pipeline stage starts from activations
        hidden = torch.randn(num_tokens, model.args.hidden_size, dtype=runner.dtype,
                             device=device)
        residual = torch.randn_like(hidden)
    set_metadata(meta)
    try:
        hidden, _ = model(token_ids, positions, hidden, residual)
    finally:
        set_metadata(None)
    logits = None
    if model.is_last_stage:
        # max_num_seqs unset: settled after this profile, never above the cap
        rows = min(config.max_num_seqs or auto_batching.MAX_SEQS, num_tokens)
        logits = model.compute_logits(hidden[:rows]).float()
        torch.softmax(logits, dim=-1)      # the sampler's largest temporary
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated(device)
    del hidden, logits
    if model.is_first_stage and seq_len > _SHORT_PREFILL:
        try:
            warm_short_prefill(runner, tables[:1], config.max_num_batched_tokens)
        except Exception:   # best effort: the first short request compiles them then
            log.warning("short-prefill warm-up failed", exc_info=True)
    for layer in runner.attn_layers:
        layer.k_cache = layer.v_cache = None
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    # memory held outside PyTorch's allocator (CUDA context, cuBLAS workspaces, NCCL)
    non_torch = total - free - torch.cuda.memory_reserved(device)
    budget = int(total * config.gpu_memory_utilization) - peak - non_torch - _HEADROOM_BYTES
    log.info("memory profile: total %.1f GiB, peak activations+weights %.1f GiB, "
             "non-torch %.1f GiB -> KV budget %.1f GiB", total / 2**30, peak / 2**30,
             non_torch / 2**30, budget / 2**30)
    return max(budget, 0)
