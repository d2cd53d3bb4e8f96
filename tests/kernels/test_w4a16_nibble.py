"""The decode W4A16 kernel with a dot per code position (w4a16_nibble.py) against the
dequantize-then-matmul reference: CPU interpreter at small shapes whose groups it takes
(group 128 for 4-bit, 64 for 8-bit), both launch modes; GPU at Llama-3-8B shapes."""
import pytest
import torch

from kubellm.kernels import w4a16_nibble
from kubellm.kernels.w4a16_gemm import w4a16_gemm

from tests.kernels.test_w4a16_gemm import check, make_weight


@pytest.mark.parametrize("mode", w4a16_nibble.MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bits,group_size", [(4, 128), (8, 64)])
def test_matches_reference(mode, dtype, bits, group_size, monkeypatch):
    # K = 3 groups: with 2 K splits one program sums two tiles, the other one
    weight, _ = make_weight(3 * group_size, 48, bits=bits, group_size=group_size)
    calls = []
    real = w4a16_nibble.w4a16_nibble_gemm
    monkeypatch.setattr(w4a16_nibble, "w4a16_nibble_gemm",
                        lambda *a, **kw: calls.append(kw["mode"]) or real(*a, **kw))
    variant = "nibble-direct" if mode == "direct" else "nibble"
    for m in (1, 5):
        check(m, weight, dtype, variant=variant)
    assert calls == [mode, mode]   # the nibble kernel ran, not the fallback


def test_groups_it_cannot_tile_fall_back_to_the_dot_kernel(monkeypatch):
    monkeypatch.setattr(w4a16_nibble, "w4a16_nibble_gemm",
                        lambda *a, **kw: pytest.fail("the nibble kernel ran"))
    for group_size, act_order in ((32, False), (128, True)):
        weight, _ = make_weight(256, 48, group_size=group_size, act_order=act_order)
        check(3, weight, torch.float32, variant="nibble")
    weight, _ = make_weight(128, 48, group_size=128)
    check(w4a16_nibble.MAX_M + 1, weight, torch.float32, variant="nibble")


def test_unsupported_reason_names_the_cause():
    assert w4a16_nibble.unsupported_reason(1, 4096, 4, 128, False) is None
    assert "group size 32" in w4a16_nibble.unsupported_reason(1, 4096, 4, 32, False)
    assert "g_idx" in w4a16_nibble.unsupported_reason(1, 4096, 4, 128, True)
    assert "at most 64 rows" in w4a16_nibble.unsupported_reason(65, 4096, 4, 128, False)
    with pytest.raises(ValueError, match="mode must be one of"):
        weight, _ = make_weight(128, 48, group_size=128)
        w4a16_nibble.w4a16_nibble_gemm(torch.randn(1, 128), weight["qweight"],
                                       weight["scales"], weight["biases"], 128, mode="fast")


def test_zero_rows_give_an_empty_output():
    weight, _ = make_weight(128, 48, group_size=128)
    out = w4a16_gemm(torch.randn(0, 128), **weight, variant="nibble")
    assert out.shape == (0, 48)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", w4a16_nibble.MODES)
@pytest.mark.parametrize("k,n", [(4096, 6144), (14336, 4096)])
def test_gpu_real_shapes(cuda, mode, k, n):
    weight, _ = make_weight(k, n, group_size=128, device=cuda)
    for m in (1, 4, 16, 64):
        check(m, weight, torch.bfloat16, cuda,
              variant="nibble-direct" if mode == "direct" else "nibble")
