"""Quantized parallel linears: online round-to-nearest, each TP rank's slice (one process
playing every rank), groups that a TP split would cut, and the forward against the float
layer holding the dequantized weight."""
from __future__ import annotations


import pytest
import torch

from kubellm.runtime.layers.linear import (ColumnParallelLinear, MergedColumnParallelLinear,
                                           QKVParallelLinear, RowParallelLinear)
from kubellm.runtime.layers.quantization.linear_method import (QuantizationLayoutError,
                                                               QuantizedLinearMethod)
from kubellm.runtime.layers.quantization.rtn import REFIT_ROUNDS, quantize_rtn
from kubellm.runtime.layers.quantization.spec import LinearQuantSpec

HIDDEN, HEAD_DIM, HEADS, KV_HEADS = 64, 8, 4, 2


def quantized(layer, group_size=16, bits=4, name="layer"):
    QuantizedLinearMethod(LinearQuantSpec(bits, group_size)).create_weights(layer, name)
    return layer


def local_weight(layer) -> torch.Tensor:
    """This rank's dequantized weight [out_local, in_local]."""
    from kubellm.kernels.quant_layout import dequantize
    spec = layer.quant_method.spec
    return dequantize(layer.qweight, layer.scales, layer.biases, spec.group_size, spec.bits,
                      layer.g_idx).t()


@pytest.mark.parametrize("symmetric", [False, True])
def test_round_to_nearest_error_is_at_most_half_a_step(symmetric):
    w = torch.randn(48, 64) * 0.02
    q = quantize_rtn(w, 4, 16, symmetric)
    assert q.codes.max() <= 15 and q.codes.dtype == torch.uint8
    step = q.scales.repeat_interleave(16, 0).t()           # [out, in]
    assert ((q.dequantize() - w).abs() <= step / 2 + 1e-7).all()
    if not symmetric:   # the codes span each group: its min and max are codes 0 and 15
        assert (q.codes.view(4, 16, 48).amin(1) == 0).all()
        assert (q.codes.view(4, 16, 48).amax(1) == 15).all()


def test_least_squares_refit_never_loses_to_the_min_max_grid():
    """Per group the refitted grid's squared error is at most the min-max grid's, and on
    Gaussian weights lower in total; weights already on a 4-bit grid stay exact; a
    constant group keeps its grid."""
    torch.manual_seed(0)
    w = torch.randn(48, 64) * 0.02
    w[5, :16] = 0.01                                         # a constant group
    plain, refit = quantize_rtn(w, 4, 16), quantize_rtn(w, 4, 16, refit_rounds=10)
    assert refit.codes.max() <= 15 and refit.codes.dtype == torch.uint8
    def group_error(q):
        return ((q.dequantize() - w) ** 2).reshape(48, 4, 16).sum(-1)
    assert (group_error(refit) <= group_error(plain) + 1e-12).all()
    assert group_error(refit).sum() < 0.9 * group_error(plain).sum()
    assert torch.equal(refit.dequantize()[5, :16], w[5, :16])
    codes = torch.randint(0, 16, (48, 64))
    codes[:, ::16], codes[:, 1::16] = 0, 15                  # every group spans the grid
    scales, biases = torch.rand(48, 4) * 0.01 + 1e-3, torch.randn(48, 4) * 0.02
    on_grid = codes * scales.repeat_interleave(16, 1) + biases.repeat_interleave(16, 1)
    exact = quantize_rtn(on_grid, 4, 16, refit_rounds=10).dequantize()
    torch.testing.assert_close(exact, on_grid, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_each_rank_holds_its_slice_of_the_quantized_weight(as_rank, tp):
    """Online quantization of each rank's slice equals slicing the whole quantized weight:
    groups run along the input features, so a column split never touches them and a row
    split cuts between whole groups."""
    torch.manual_seed(0)
    full, gate, up = torch.randn(32, HIDDEN), torch.randn(48, HIDDEN), torch.randn(48, HIDDEN)
    q, k, v = (torch.randn(n * HEAD_DIM, HIDDEN) for n in (HEADS, KV_HEADS, KV_HEADS))
    deq = lambda w: quantize_rtn(w, 4, 16, refit_rounds=REFIT_ROUNDS).dequantize()  # noqa: E731
    cols, rows, merged, qkv = [], [], [], []
    for rank in range(tp):
        as_rank(tp, rank)
        layer = quantized(ColumnParallelLinear(HIDDEN, 32))
        layer.quant_method.load(layer, full)
        cols.append(local_weight(layer))
        layer = quantized(RowParallelLinear(HIDDEN, 32))
        layer.quant_method.load(layer, full)
        rows.append(local_weight(layer))
        layer = quantized(MergedColumnParallelLinear(HIDDEN, [48, 48]))
        layer.quant_method.load(layer, gate, 0)
        layer.quant_method.load(layer, up, 1)
        merged.append(local_weight(layer).chunk(2))
        layer = quantized(QKVParallelLinear(HIDDEN, HEAD_DIM, HEADS, KV_HEADS))
        for shard, w in zip("qkv", (q, k, v)):
            layer.quant_method.load(layer, w, shard)
        qkv.append(local_weight(layer))
    assert torch.equal(torch.cat(cols), deq(full))
    assert torch.equal(torch.cat(rows, 1), deq(full))
    assert torch.equal(torch.cat([g for g, _ in merged]), deq(gate))
    assert torch.equal(torch.cat([u for _, u in merged]), deq(up))
    q_rows = HEADS * HEAD_DIM // tp
    assert torch.equal(torch.cat([w[:q_rows] for w in qkv]), deq(q))
    if tp <= KV_HEADS:
        kv_rows = KV_HEADS * HEAD_DIM // tp
        assert torch.equal(torch.cat([w[q_rows:q_rows + kv_rows] for w in qkv]), deq(k))
    else:   # fewer KV heads than ranks: each rank holds its (replicated) KV head whole
        head = lambda r: slice(r // (tp // KV_HEADS) * HEAD_DIM, (r // (tp // KV_HEADS) + 1) * HEAD_DIM)  # noqa: E501,E731
        for r, w in enumerate(qkv):
            assert torch.equal(w[q_rows + HEAD_DIM:], deq(v)[head(r)])


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_quantized_lm_head_holds_its_vocabulary_slice(as_rank, tp):
    """quantize_lm_head: the head splits the vocabulary like the float one (11 rows: the
    last rank's slice is short, its padding rows' logits are cut off later)."""
    from kubellm.runtime.layers.embedding import ParallelLMHead
    torch.manual_seed(0)
    vocab, full = 11, torch.randn(11, HIDDEN)
    expected = quantize_rtn(full, 4, 16, refit_rounds=REFIT_ROUNDS).dequantize()
    x = torch.randn(3, HIDDEN)
    for rank in range(tp):
        as_rank(tp, rank)
        head = quantized(ParallelLMHead(vocab, HIDDEN), name="lm_head")
        head.quant_method.load(head, full)
        rows = head.vocab_end - head.vocab_start
        assert torch.equal(local_weight(head)[:rows], expected[head.vocab_start:head.vocab_end])
        torch.testing.assert_close(head.project(x)[:, :rows],
                                   x @ expected[head.vocab_start:head.vocab_end].t())


def test_forward_equals_the_float_layer_with_the_dequantized_weight():
    layer = quantized(ColumnParallelLinear(HIDDEN, 24, bias=True))
    layer.bias.data = torch.randn(24)
    layer.quant_method.load(layer, torch.randn(24, HIDDEN))
    x = torch.randn(5, HIDDEN)
    expected = torch.nn.functional.linear(x, local_weight(layer), layer.bias)
    torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)


def test_a_tp_split_that_cuts_groups_names_sizes(as_rank):
    as_rank(4, 0)   # 64 input features over 4 ranks: 16 each, groups of 32
    with pytest.raises(QuantizationLayoutError,
                       match=r"tensor_parallel_size=4 gives each rank 16 of 64 input "
                             r"features, which splits the quantization groups of 32"):
        quantized(RowParallelLinear(HIDDEN, 8), group_size=32, name="down_proj")
    as_rank(2, 0)   # 32 each: whole groups
    quantized(RowParallelLinear(HIDDEN, 8), group_size=32)


def test_group_size_must_divide_the_input_features():
    with pytest.raises(QuantizationLayoutError, match="in_features=64 is not a multiple of "
                                                      "the quantization group size 48"):
        quantized(ColumnParallelLinear(HIDDEN, 8), group_size=48)


def test_tinygemm_copy_serves_decode_rows_and_larger_calls_keep_the_layout(as_rank):
    """The w4a16_tinygemm switch's layer part, through torch's CPU variant of the kernel:
    calls of at most TINYGEMM_MAX_ROWS rows read the repacked copy, larger ones our layout;
    both give the dequantized product. A layer tinygemm cannot take says why."""
    from kubellm.runtime.layers.quantization.linear_method import TINYGEMM_MAX_ROWS
    as_rank(1, 0)
    torch.manual_seed(0)
    layer = quantized(ColumnParallelLinear(256, 64).to(torch.bfloat16), group_size=64)
    layer.quant_method.load(layer, torch.randn(64, 256) * 0.02)
    assert layer.quant_method.add_tinygemm(layer) is None
    expected = lambda x: (x.float() @ local_weight(layer).t().float())  # noqa: E731
    for rows in (1, TINYGEMM_MAX_ROWS, TINYGEMM_MAX_ROWS + 1):
        x = torch.randn(rows, 256, dtype=torch.bfloat16)
        got = layer.quant_method.apply(layer, x).float()
        torch.testing.assert_close(got, expected(x), atol=2e-2, rtol=2e-2)
    layer.tinygemm = (layer.tinygemm[0].zero_(), layer.tinygemm[1])   # only the copy
    x = torch.randn(TINYGEMM_MAX_ROWS + 1, 256, dtype=torch.bfloat16)
    torch.testing.assert_close(layer.quant_method.apply(layer, x).float(), expected(x),
                               atol=2e-2, rtol=2e-2)
    assert not torch.allclose(layer.quant_method.apply(layer, x[:1]).float(),
                              expected(x[:1]), atol=2e-2, rtol=2e-2)
    fp32 = quantized(ColumnParallelLinear(256, 64), group_size=64)
    assert "bf16 activations" in fp32.quant_method.add_tinygemm(fp32)
    assert getattr(fp32, "tinygemm", None) is None

