"""PyTorch's int4 GEMM on weights repacked from our layout: the same product as our
reference (on the CPU through torch's CPU variant; on CUDA, marked gpu, at a Llama-3-8B
shape), and a reason for each layer it cannot take."""
import pytest
import torch

from kubellm.kernels.tinygemm import int4pack_mm, repack, unsupported_reason
from kubellm.kernels.w4a16_gemm import w4a16_gemm_ref

from .test_w4a16_gemm import make_weight


def _check(k, n, m, group_size, device):
    weight, _ = make_weight(k, n, group_size=group_size, device=device)
    scales = weight["scales"].to(torch.bfloat16)
    biases = weight["biases"].to(torch.bfloat16)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(device,
                                                                         torch.bfloat16)
    ref = w4a16_gemm_ref(x, weight["qweight"], scales, biases, group_size)
    out = int4pack_mm(x, *repack(weight["qweight"], scales, biases, group_size), group_size)
    assert out.shape == ref.shape and out.dtype == torch.bfloat16
    # zero = bias + 8 scale is rounded to bf16 once more than our bias
    torch.testing.assert_close(out.float(), ref.float(), atol=3e-2, rtol=3e-2)
    assert (out.float() - ref.float()).abs().mean() < 0.05 * ref.float().abs().mean()


@pytest.mark.parametrize("m", [1, 7])
def test_cpu_variant_matches_our_reference(m):
    _check(256, 64, m, 64, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16, 200])
def test_cuda_matches_our_reference_at_a_real_shape(cuda, m):
    _check(4096, 4096, m, 128, cuda)


def test_unsupported_layers_are_named():
    bf16 = torch.bfloat16
    assert unsupported_reason(4096, 4096, 128, 4, False, bf16) is None
    assert "8-bit" in unsupported_reason(4096, 4096, 128, 8, False, bf16)
    assert "g_idx" in unsupported_reason(4096, 4096, 128, 4, True, bf16)
    assert "float16" in unsupported_reason(4096, 4096, 128, 4, False, torch.float16)
    assert "group sizes" in unsupported_reason(4096, 4096, 16, 4, False, bf16)
    assert "K=4000" in unsupported_reason(4000, 4096, 32, 4, False, bf16)
