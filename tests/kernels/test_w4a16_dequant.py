"""w4a16_dequant (packed codes -> dense W in x's dtype, then torch.mm) against
quant_layout.dequantize, its reference: CPU interpreter with small shapes; the GPU test of
every variant (test_w4a16_gemm.py) runs it at a real shape."""
import pytest
import torch

from kubellm.kernels import w4a16_dequant
from kubellm.kernels.quant_layout import dequantize
from kubellm.kernels.w4a16_gemm import w4a16_gemm, w4a16_gemm_ref
from tests.kernels.test_w4a16_gemm import check, make_weight


def dense(weight, dtype):
    k = weight["qweight"].shape[0] * 32 // weight["bits"]
    out = torch.full((k, weight["qweight"].shape[1]), float("nan"), dtype=dtype)
    return w4a16_dequant.dequantize_into(out, weight["qweight"], weight["scales"],
                                         weight["biases"], weight["group_size"],
                                         weight["bits"], weight["g_idx"])


def assert_same_weights(out, weight, dtype):
    ref = dequantize(weight["qweight"], weight["scales"], weight["biases"],
                     weight["group_size"], weight["bits"], weight["g_idx"], dtype=dtype)
    # fp32: c s rounded or not before + b (an ulp of c s, up to 255 s ~ 1.3: 1.2e-7);
    # fp16 rounds to nearest as torch does; the interpreter rounds fp32 -> bf16 toward
    # zero: one bf16 ulp
    rtol = {torch.float32: 1e-6, torch.float16: 0.0, torch.bfloat16: 2 ** -7}[dtype]
    torch.testing.assert_close(out, ref, atol=2e-7 if dtype == torch.float32 else 0.0,
                               rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k, n, bits, group_size, act_order", [
    (128, 64, 4, 128, False),   # a program's rows in one group: one row of scales
    (128, 40, 4, 8, False),     # groups smaller than a program's rows: gathered per row
    (96, 48, 4, 32, True),      # act order: each row's group from g_idx
    (64, 33, 8, 16, False),     # 8-bit codes; N not a multiple of the tile
    (40, 32, 4, 8, False),      # K not a multiple of a program's rows of words
])
def test_dense_weights_equal_the_reference(dtype, k, n, bits, group_size, act_order):
    weight, _ = make_weight(k, n, bits=bits, group_size=group_size, act_order=act_order,
                            seed=k + n)
    w = dict(weight, scales=weight["scales"].to(dtype), biases=weight["biases"].to(dtype))
    assert_same_weights(dense(w, dtype), w, dtype)


def test_extreme_codes_at_every_position_of_a_word():
    weight, _ = make_weight(128, 40, group_size=64, seed=3)
    for code in (0, 15):
        w = dict(weight, qweight=torch.full_like(weight["qweight"], -1 if code else 0))
        out = dense(w, torch.float32)
        g = torch.arange(128) // 64
        torch.testing.assert_close(out, code * w["scales"][g] + w["biases"][g], atol=1e-9,
                                   rtol=1e-6)


def test_a_column_slice_is_filled_and_nothing_beside_it(monkeypatch):
    """The slab path: the weight in slabs of columns (the last one narrower), each
    dequantized into a column slice of one temporary and multiplied into its columns
    of the output."""
    weight, _ = make_weight(64, 300, group_size=32, seed=7)
    monkeypatch.setattr(w4a16_dequant, "SLAB_ELEMENTS", 64 * 128)   # slabs of 128 columns
    wide = torch.full((64, 200), float("nan"))
    sliced = dict(weight, qweight=weight["qweight"][:, 100:228],
                  scales=weight["scales"][:, 100:228], biases=weight["biases"][:, 100:228])
    out = w4a16_dequant.dequantize_into(wide[:, 50:178], sliced["qweight"], sliced["scales"],
                                        sliced["biases"], 32, 4)
    assert_same_weights(out, sliced, torch.float32)
    assert wide[:, :50].isnan().all() and wide[:, 178:].isnan().all()
    mms = []
    real_mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda *a, **kw: mms.append(a[1].shape) or
                        real_mm(*a, **kw))
    x = torch.randn(5, 64)
    torch.testing.assert_close(w4a16_gemm(x, **weight, variant="dequant"),
                               w4a16_gemm_ref(x, **weight), atol=1e-4, rtol=1e-4)
    assert mms == [(64, 128), (64, 128), (64, 44)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_dequant_variant_matches_the_reference(dtype):
    for m, weight in ((1, make_weight(128, 80, group_size=32)[0]),
                      (130, make_weight(96, 40, group_size=32, act_order=True)[0]),
                      (7, make_weight(64, 40, bits=8, group_size=16)[0])):
        check(m, weight, dtype, variant="dequant")

