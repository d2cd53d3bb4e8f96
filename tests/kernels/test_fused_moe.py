"""fused_moe, moe_align_block_size and topk_softmax against their references (CPU interpreter: small
shapes; GPU, marked gpu: real shapes of Qwen3-30B-A3B and Mixtral-8x7B layers)."""
from __future__ import annotations

import pytest
import torch

from kubellm.kernels.fused_moe import TOLERANCES, fused_moe, fused_moe_ref
from kubellm.kernels.fused_moe_configs import (MoeConfig, Tile, choose_config, default_config,
                                               set_table, shape_key)
from kubellm.kernels.moe_align import moe_align_block_size, moe_align_block_size_ref
from kubellm.kernels.topk_softmax import TOLERANCES as TOPK_TOLERANCES
from kubellm.kernels.topk_softmax import topk_softmax, topk_softmax_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def routing(num_tokens, num_experts, top_k, seed=0, device="cpu"):
    """Random distinct experts per token and softmax-like weights."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(num_tokens, num_experts, generator=gen)
    weights, ids = scores.topk(top_k, dim=-1)
    return (weights / weights.sum(-1, keepdim=True)).to(device), ids.to(torch.int32).to(device)


def weights(num_experts, hidden, inter, dtype, seed=1, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    scale = hidden ** -0.5
    w13 = torch.randn(num_experts, 2 * inter, hidden, generator=gen) * scale
    w2 = torch.randn(num_experts, hidden, inter, generator=gen) * inter ** -0.5
    return w13.to(dtype).to(device), w2.to(dtype).to(device)


def assert_close(actual, expected):
    atol, rtol = TOLERANCES[expected.dtype]
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize("block_m", [1, 4, 16])
@pytest.mark.parametrize("num_tokens, num_experts, expert_start, num_local",
                         [(13, 6, 0, 6), (13, 6, 2, 3),
                          (300, 200, 0, 200)])   # 38 chunks: more than one scan tile
def test_align_matches_reference(block_m, num_tokens, num_experts, expert_start, num_local):
    _, ids = routing(num_tokens, num_experts, 4 if num_tokens > 100 else 2, seed=block_m)
    sorted_ids, blocks, padded = moe_align_block_size(ids, num_local, block_m, expert_start)
    ref_ids, ref_blocks, ref_padded = moe_align_block_size_ref(ids, num_local, block_m,
                                                               expert_start)
    assert torch.equal(padded, ref_padded)
    n = int(padded)
    assert n % block_m == 0
    assert blocks[:n // block_m].tolist() == ref_blocks
    assert torch.equal(sorted_ids, ref_ids)   # pairs keep their order inside a run


def test_align_with_no_pairs_for_this_rank():
    ids = torch.zeros(4, 2, dtype=torch.int64)
    sorted_ids, blocks, padded = moe_align_block_size(ids, 2, 16, expert_start=2)
    assert int(padded) == 0 and (sorted_ids == 8).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_tokens, top_k", [(1, 2), (7, 2), (40, 4)])
def test_fused_moe_matches_per_expert_loop(dtype, num_tokens, top_k):
    num_experts, hidden, inter = 8, 48, 40       # not multiples of the tiles: edge masks
    w13, w2 = weights(num_experts, hidden, inter, dtype)
    x = torch.randn(num_tokens, hidden, generator=torch.Generator().manual_seed(2)).to(dtype)
    topk_w, topk_ids = routing(num_tokens, num_experts, top_k)
    out = fused_moe(x, w13, w2, topk_w, topk_ids)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close(out, fused_moe_ref(x, w13, w2, topk_w, topk_ids))


def test_expert_parallel_ranks_sum_to_the_whole():
    num_experts, hidden, inter = 8, 32, 32
    w13, w2 = weights(num_experts, hidden, inter, torch.float32)
    x = torch.randn(9, hidden)
    topk_w, topk_ids = routing(9, num_experts, 2)
    whole = fused_moe(x, w13, w2, topk_w, topk_ids)
    parts = [fused_moe(x, w13[s:s + 4], w2[s:s + 4], topk_w, topk_ids, expert_start=s,
                       num_global_experts=num_experts) for s in (0, 4)]
    assert_close(parts[0] + parts[1], whole)
    assert_close(parts[1], fused_moe_ref(x, w13[4:], w2[4:], topk_w, topk_ids, 4))


def test_every_block_size_gives_the_same_result():
    """Config choice changes speed only: forced tiles, grouped order and a block_m larger
    than any expert's share give the reference's result."""
    w13, w2 = weights(4, 32, 48, torch.float32)
    x = torch.randn(11, 32)
    topk_w, topk_ids = routing(11, 4, 2)
    ref = fused_moe_ref(x, w13, w2, topk_w, topk_ids)
    for block_m, group_m in ((16, 1), (32, 4), (64, 8)):
        config = MoeConfig(block_m, Tile(16, 16, group_m), Tile(32, 16, group_m))
        assert_close(fused_moe(x, w13, w2, topk_w, topk_ids, config=config), ref)


def test_launcher_names_bad_arguments():
    w13, w2 = weights(4, 32, 16, torch.float32)
    x = torch.randn(3, 32)
    topk_w, topk_ids = routing(3, 4, 2)
    with pytest.raises(TypeError, match="w13 must have dtype float16"):
        fused_moe(x.half(), w13, w2, topk_w, topk_ids)
    with pytest.raises(ValueError, match="w2 must have shape"):
        fused_moe(x, w13, w2[:, :, :8], topk_w, topk_ids)
    with pytest.raises(TypeError, match="topk_weights must have dtype float32"):
        fused_moe(x, w13, w2, topk_w.half(), topk_ids)
    with pytest.raises(ValueError, match="not within the 4 experts"):
        fused_moe(x, w13, w2, topk_w, topk_ids, expert_start=2)
    assert fused_moe(x[:0], w13, w2, topk_w[:0], topk_ids[:0]).shape == (0, 32)


def test_table_entries_are_used_for_their_bucket(monkeypatch):
    dev = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Test GPU")
    tuned = MoeConfig(32, Tile(128, 64, 8, 8, 4), Tile(64, 128, 8, 4, 3))
    small = MoeConfig(16, Tile(32, 64), Tile(64, 64))
    key = shape_key(128, 2048, 768, 8, torch.bfloat16)
    set_table({"Test GPU": {key: {"16": small.to_dict(), "256": tuned.to_dict()}}})
    try:
        pick = lambda t: choose_config(t, 8, 128, 2048, 768, torch.bfloat16, dev)  # noqa
        assert pick(1) == small and pick(16) == small
        assert pick(17) == tuned and pick(9000) == tuned
        other = choose_config(4, 2, 8, 64, 32, torch.bfloat16, dev)
        assert other == default_config(4, 2, 8, 64, 32, torch.bfloat16)
    finally:
        set_table(None)


@pytest.mark.gpu
@pytest.mark.parametrize("num_tokens", [1, 64, 512, 4096])
@pytest.mark.parametrize("shape", ["qwen3-30b-a3b", "mixtral-8x7b-tp4"])
def test_real_shapes_on_gpu(cuda, shape, num_tokens):
    num_experts, top_k, hidden, inter = {"qwen3-30b-a3b": (128, 8, 2048, 768),
                                         "mixtral-8x7b-tp4": (8, 2, 4096, 3584)}[shape]
    w13, w2 = weights(num_experts, hidden, inter, torch.bfloat16, device=cuda)
    x = torch.randn(num_tokens, hidden, device=cuda).to(torch.bfloat16)
    topk_w, topk_ids = routing(num_tokens, num_experts, top_k, device=cuda)
    out = fused_moe(x, w13, w2, topk_w, topk_ids)
    ref = fused_moe_ref(x, w13, w2, topk_w, topk_ids)
    assert_close(out, ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_experts, top_k, renormalize, round_to", [
    (8, 2, True, None), (60, 4, False, torch.bfloat16), (128, 8, True, torch.float16),
    (5, 5, False, None)])
def test_topk_softmax_matches_torch(dtype, num_experts, top_k, renormalize, round_to):
    gen = torch.Generator().manual_seed(num_experts)
    # distinct logits (a permutation, scaled): no ties, so torch's order is defined too
    logits = torch.stack([torch.randperm(num_experts, generator=gen) for _ in range(37)])
    logits = (logits.float() * 0.05 - 1).to(dtype)
    weights, ids = topk_softmax(logits, top_k, renormalize, round_to)
    ref_weights, ref_ids = topk_softmax_ref(logits, top_k, renormalize, round_to)
    assert torch.equal(ids, ref_ids)
    atol, rtol = TOPK_TOLERANCES[dtype]
    if round_to is not None:   # one rounding to the dtype may fall the other way
        atol, rtol = 0, 2 ** -7
    torch.testing.assert_close(weights, ref_weights, atol=atol, rtol=rtol)


def test_topk_softmax_breaks_ties_toward_the_lower_expert():
    logits = torch.tensor([[0.0, 1.0, 1.0, 0.5, 1.0]])
    _, ids = topk_softmax(logits, 2, renormalize=True)
    assert ids.tolist() == [[1, 2]]
    with pytest.raises(ValueError, match="top_k must be between 1 and the 5 experts"):
        topk_softmax(logits, 6, renormalize=True)


def test_committed_table_holds_a_config_for_every_bucket_it_names():
    """The block sizes tuned on the H200 (benchmarks/gpu/moe.py --parts tune) parse, and
    each bucket was faster than the untuned default when it was measured."""
    import json

    from kubellm.kernels.fused_moe_configs import TABLE_PATH
    table = json.loads(TABLE_PATH.read_text())
    assert table, "the committed table is empty"
    for device, shapes in table.items():
        for key, buckets in shapes.items():
            assert [int(b) for b in buckets] == sorted(int(b) for b in buckets), key
            for bucket, entry in buckets.items():
                config = MoeConfig.from_dict(entry)
                assert config.block_m in (16, 32, 64, 128), (device, key, bucket)
                assert entry["gemms_ms"] <= entry["default_gemms_ms"], (device, key, bucket)
