"""The parallel layers' loaders, one process playing every TP rank in turn: each rank's
slice is exactly its part of the checkpoint tensor, and the parts put back together
give the whole (GQA with KV heads split or replicated, a vocabulary that does not split
evenly)."""
from __future__ import annotations


import pytest
import torch

from kubellm.runtime.layers.embedding import VocabParallelEmbedding
from kubellm.runtime.layers.linear import (ColumnParallelLinear, MergedColumnParallelLinear,
                                           QKVParallelLinear, RowParallelLinear)

HIDDEN, HEAD_DIM, HEADS, KV_HEADS, VOCAB = 8, 2, 4, 2, 11


def _loaded(layer, name: str, full: torch.Tensor, shard=None) -> torch.Tensor:
    param = getattr(layer, name)
    layer.load_weight(param, full, shard)
    return param.data.clone()


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_column_row_and_merged_shards_rebuild_the_whole(as_rank, tp):
    full = torch.randn(16, HIDDEN)
    gate, up = torch.randn(12, HIDDEN), torch.randn(12, HIDDEN)
    cols, rows, merged = [], [], []
    for rank in range(tp):
        as_rank(tp, rank)
        cols.append(_loaded(ColumnParallelLinear(HIDDEN, 16), "weight", full))
        rows.append(_loaded(RowParallelLinear(16, HIDDEN), "weight", full.T.contiguous()))
        layer = MergedColumnParallelLinear(HIDDEN, [12, 12])
        layer.load_weight(layer.weight, gate, 0)
        layer.load_weight(layer.weight, up, 1)
        g, u = layer.weight.data.chunk(2)  # SiluAndMul splits the local output in halves
        merged.append((g, u))
    assert all(c.shape == (16 // tp, HIDDEN) for c in cols)
    assert torch.equal(torch.cat(cols), full)
    assert torch.equal(torch.cat(rows, dim=1), full.T)
    assert torch.equal(torch.cat([g for g, _ in merged]), gate)
    assert torch.equal(torch.cat([u for _, u in merged]), up)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_qkv_rank_holds_its_query_heads_and_their_kv_head(as_rank, tp):
    q = torch.randn(HEADS * HEAD_DIM, HIDDEN)
    k = torch.randn(KV_HEADS * HEAD_DIM, HIDDEN)
    v = torch.randn(KV_HEADS * HEAD_DIM, HIDDEN)
    for rank in range(tp):
        as_rank(tp, rank)
        layer = QKVParallelLinear(HIDDEN, HEAD_DIM, HEADS, KV_HEADS)
        for shard, full in (("q", q), ("k", k), ("v", v)):
            layer.load_weight(layer.weight, full, shard)
        nq, nkv = HEADS // tp, max(KV_HEADS // tp, 1)
        assert (layer.num_heads, layer.num_kv_heads) == (nq, nkv)
        my_q, my_k, my_v = layer.weight.data.split([nq * HEAD_DIM, nkv * HEAD_DIM,
                                                    nkv * HEAD_DIM])
        assert torch.equal(my_q, q[rank * nq * HEAD_DIM:(rank + 1) * nq * HEAD_DIM])
        for head in range(nq):  # GQA: every local query head finds its own KV head here
            global_kv = (rank * nq + head) // (HEADS // KV_HEADS)
            local_kv = global_kv - (rank * nq) // (HEADS // KV_HEADS)
            want = slice(global_kv * HEAD_DIM, (global_kv + 1) * HEAD_DIM)
            got = slice(local_kv * HEAD_DIM, (local_kv + 1) * HEAD_DIM)
            assert torch.equal(my_k[got], k[want]) and torch.equal(my_v[got], v[want])


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_vocab_shards_are_padded_slices(as_rank, tp):
    full = torch.randn(VOCAB, HIDDEN)
    parts = []
    for rank in range(tp):
        as_rank(tp, rank)
        layer = VocabParallelEmbedding(VOCAB, HIDDEN)
        part = _loaded(layer, "weight", full)
        assert part.shape == (-(-VOCAB // tp), HIDDEN)
        rows = layer.vocab_end - layer.vocab_start
        assert not part[rows:].any()  # padding rows: zero logits, sliced away later
        parts.append(part[:rows])
    assert torch.equal(torch.cat(parts), full)
