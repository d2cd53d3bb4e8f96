"""prefill_attention (new keys from the projection output, context from the pages)
against its reference and against the paged kernel on the same step."""
import pytest
import torch

from kubellm.kernels.paged_attention import paged_attention
from kubellm.kernels.prefill_attention import (
    TOLERANCES, prefill_attention, prefill_attention_ref, tma_supported,
)
from tests.kernels.test_paged_attention import make_batch


def add_new_keys(batch, seed=1):
    """The step's own keys and values as strided views of a fused projection output, and
    the same keys written into the batch's pages (what write_kv does before attention)."""
    q = batch["q"]
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = batch["k_cache"].shape[2]
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(num_tokens, num_heads + 2 * num_kv_heads, head_dim, generator=gen)
    qkv = qkv.to(q.dtype).to(q.device)
    qkv[:, :num_heads] = q
    _, k, v = qkv.split([num_heads, num_kv_heads, num_kv_heads], dim=1)
    block_size = batch["k_cache"].shape[1]
    cu, seq_lens = batch["cu_seqlens_q"].cpu(), batch["seq_lens"].cpu()
    for b in range(len(seq_lens)):
        start, end, seq_len = int(cu[b]), int(cu[b + 1]), int(seq_lens[b])
        pos = torch.arange(seq_len - (end - start), seq_len)
        blocks = batch["block_tables"][b, pos // block_size].long()
        batch["k_cache"][blocks, pos % block_size] = k[start:end]
        batch["v_cache"][blocks, pos % block_size] = v[start:end]
    return {**batch, "q": qkv[:, :num_heads], "k": k, "v": v}


def check(batch, **kwargs):
    out = prefill_attention(**batch, **kwargs)
    ref = prefill_attention_ref(**batch)
    atol, rtol = TOLERANCES[batch["q"].dtype]
    torch.testing.assert_close(out, ref, atol=atol, rtol=rtol)
    return out


# a fresh prompt, prefix-cached chunks (context in the pages), decodes, a one-token
# prompt; longer than the interpreter's 16-token tiles so that unmasked tiles come first
MIXED = dict(q_lens=[37, 20, 1, 1, 2, 1], seq_lens=[37, 53, 40, 1, 6, 17])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("use_tma", [False, True])
def test_mixed_batch_matches_reference(dtype, use_tma):
    batch = add_new_keys(make_batch(**MIXED, dtype=dtype))
    assert tma_supported(batch["q"], batch["k"], batch["v"])
    check(batch, use_tma=use_tma)


def test_same_result_as_the_paged_kernel():
    batch = add_new_keys(make_batch(**MIXED, num_heads=6, num_kv_heads=2))
    paged = paged_attention(**{k: v for k, v in batch.items() if k not in ("k", "v")})
    ours = prefill_attention(**batch)
    torch.testing.assert_close(ours, paged, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("use_tma", [False, True])
def test_a_subset_of_the_step_starting_past_row_zero(use_tma):
    """The decodes of a mixed step go elsewhere: cu_seqlens_q starts at their end, and
    the rows before it are left alone."""
    batch = add_new_keys(make_batch(q_lens=[1, 1, 19, 33], seq_lens=[9, 30, 19, 50],
                                    head_dim=32))
    tail = dict(batch, block_tables=batch["block_tables"][2:], seq_lens=batch["seq_lens"][2:],
                cu_seqlens_q=batch["cu_seqlens_q"][2:], max_seqlen_q=33)
    out = torch.full_like(batch["q"], 7.0)
    prefill_attention(**tail, out=out, use_tma=use_tma)
    assert torch.all(out[:2] == 7.0)
    atol, rtol = TOLERANCES[torch.float32]
    torch.testing.assert_close(out[2:], prefill_attention_ref(**batch)[2:], atol=atol, rtol=rtol)


@pytest.mark.parametrize("num_heads,num_kv_heads", [(2, 2), (4, 1)])
def test_gqa_groups_and_block_ids_near_top_of_pool(num_heads, num_kv_heads):
    check(add_new_keys(make_batch(**MIXED, num_heads=num_heads, num_kv_heads=num_kv_heads,
                                  num_blocks=4096, top_of_pool=True)))


def test_layouts_descriptors_cannot_take_fall_back():
    batch = add_new_keys(make_batch(**MIXED))
    odd = torch.randn(batch["q"].shape[0], 4, 17)[..., :16]    # 68-byte rows
    assert not tma_supported(odd, batch["k"], batch["v"])
    batch["q"] = odd
    check(batch, use_tma=True)


def test_bad_inputs_are_named():
    batch = add_new_keys(make_batch(**MIXED))
    with pytest.raises(ValueError, match="k shape"):
        prefill_attention(**{**batch, "k": batch["k"][:3], "v": batch["v"][:3]})
    with pytest.raises(TypeError, match="v"):
        prefill_attention(**{**batch, "v": batch["v"].half()})
    with pytest.raises(ValueError, match="heads/head_dim"):
        prefill_attention(**{**batch, "k": batch["k"][:, :1], "v": batch["v"][:, :1]})
    with pytest.raises(ValueError, match="max_seqlen_q"):
        prefill_attention(**{**batch, "max_seqlen_q": 0})
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        prefill_attention(**{**batch, "cu_seqlens_q": batch["cu_seqlens_q"][:-1]})


# --- GPU: Llama-3-8B attention shape (32 heads, 8 KV heads, D=128, block 16) ---

LLAMA3 = dict(num_heads=32, num_kv_heads=8, head_dim=128, block_size=16)


@pytest.mark.gpu
@pytest.mark.parametrize("use_tma", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_mixed_batch_llama3_shape(cuda, dtype, use_tma):
    batch = add_new_keys(make_batch(q_lens=[300, 77, 1, 1, 1, 513, 2048],
                                    seq_lens=[300, 1100, 17, 4096, 1, 700, 2048],
                                    num_blocks=4096, dtype=dtype, device=cuda, **LLAMA3))
    check(batch, use_tma=use_tma)


@pytest.mark.gpu
@pytest.mark.parametrize("use_tma", [False, True])
def test_gpu_long_prompt_and_large_pool(cuda, use_tma):
    # 8,192 new tokens after 4,000 cached ones; block ids whose offsets pass 2^31
    batch = add_new_keys(make_batch(q_lens=[8192, 5], seq_lens=[12192, 9], num_blocks=140_000,
                                    top_of_pool=True, dtype=torch.bfloat16, device=cuda,
                                    **LLAMA3))
    check(batch, use_tma=use_tma)


def test_sliced_sequence_metadata_does_not_change_the_binary():
    """A mixed step hands the prefill kernel seq_lens[nd:] etc., whose alignment depends
    on the number of decodes: the attention kernels must not specialise on it (each new
    specialisation compiles while serving)."""
    from kubellm.kernels import paged_attention as paged
    from kubellm.kernels import prefill_attention as prefill
    for kernel in (prefill._prefill_attention_kernel, paged._paged_attention_kernel):
        if hasattr(kernel, "params"):   # compiled: the JIT's own view of its arguments
            flagged = {p.name for p in kernel.params if p.do_not_specialize_on_alignment}
        else:                           # the interpreter keeps the decorator's options
            flagged = set(kernel.kwargs["do_not_specialize_on_alignment"])
        assert flagged == set(paged.SEQUENCE_METADATA), kernel


@pytest.mark.gpu
@pytest.mark.parametrize("use_tma", [False, True])
def test_gpu_a_step_past_an_odd_number_of_decodes_compiles_nothing(cuda, use_tma):
    """After one mixed step starting past 4 decodes, the same step past 1, 2 and 3 (the
    metadata slices 4, 8 and 12 bytes off alignment) runs on the binary already built."""
    from kubellm.runtime.worker import compile_watch
    from triton import knobs
    hooks = knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook
    try:
        assert compile_watch.watch_compiles_after_startup()
        count = None
        for nd in (4, 1, 2, 3):
            q_lens = [1] * nd + [300, 77]
            batch = add_new_keys(make_batch(q_lens=q_lens, seq_lens=[40] * nd + [300, 1100],
                                            num_blocks=512, dtype=torch.bfloat16,
                                            device=cuda, **LLAMA3))
            tail = dict(batch, block_tables=batch["block_tables"][nd:],
                        seq_lens=batch["seq_lens"][nd:],
                        cu_seqlens_q=batch["cu_seqlens_q"][nd:], max_seqlen_q=300)
            out = torch.zeros_like(batch["q"])
            prefill_attention(**tail, out=out, use_tma=use_tma)
            torch.cuda.synchronize()
            ref = prefill_attention_ref(**batch)
            atol, rtol = TOLERANCES[torch.bfloat16]
            torch.testing.assert_close(out[nd:], ref[nd:], atol=atol, rtol=rtol)
            if count is None:
                count = compile_watch.compiles_after_startup
        assert compile_watch.compiles_after_startup == count
    finally:
        knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = hooks
