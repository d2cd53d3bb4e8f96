"""silu_and_mul, rms_norm and fused_add_rms_norm against their references."""
import pytest
import torch

from kubellm.kernels.activation import TOLERANCES, silu_and_mul, silu_and_mul_ref
from kubellm.kernels.rms_norm import (
    fused_add_rms_norm, fused_add_rms_norm_ref, rms_norm, rms_norm_ref,
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def randn(*shape, dtype, device="cpu", seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)


def assert_same_sum(actual, expected):
    """new_residual is one rounding of an fp32 sum: exact, except that triton's CPU
    interpreter rounds fp32 -> bf16 toward zero where the GPU rounds to nearest even."""
    one_bf16_ulp = 2 ** -7 if actual.dtype == torch.bfloat16 and actual.device.type == "cpu" else 0
    torch.testing.assert_close(actual, expected, atol=0, rtol=one_bf16_ulp)


def assert_close(actual, expected):
    atol, rtol = TOLERANCES[expected.dtype]
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(dtype):
    x = randn(5, 2 * 40, dtype=dtype) * 3
    assert_close(silu_and_mul(x), silu_and_mul_ref(x))
    assert silu_and_mul(x).shape == (5, 40)


def test_silu_and_mul_strided_rows_and_multi_block():
    x = randn(3, 2 * 1500 + 7, dtype=torch.float32)[:, :3000]  # rows strided, width > BLOCK
    assert_close(silu_and_mul(x), silu_and_mul_ref(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(dtype):
    x, w = randn(4, 48, dtype=dtype), randn(48, dtype=dtype, seed=1)
    assert_close(rms_norm(x, w, 1e-6), rms_norm_ref(x, w, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_leaves_inputs_alone(dtype):
    x, res, w = randn(4, 48, dtype=dtype), randn(4, 48, dtype=dtype, seed=2), randn(48, dtype=dtype, seed=1)
    x0, res0 = x.clone(), res.clone()
    normed, new_res = fused_add_rms_norm(x, res, w, 1e-5)
    ref_normed, ref_res = fused_add_rms_norm_ref(x, res, w, 1e-5)
    assert_same_sum(new_res, ref_res)
    assert_close(normed, ref_normed)
    assert torch.equal(x, x0) and torch.equal(res, res0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_per_head_of_a_fused_projection(dtype):
    """Qwen3's q/k norm: [T, heads, D] views of the qkv output, each head's row normed."""
    qkv = randn(5, 4 + 2 + 2, 16, dtype=dtype)
    q, k = qkv[:, :4], qkv[:, 4:6]
    w = randn(16, dtype=dtype, seed=1)
    for x in (q, k):
        out = rms_norm(x, w, 1e-6)
        assert out.shape == x.shape and out.is_contiguous()
        assert_close(out, rms_norm_ref(x, w, 1e-6))


def test_rms_norm_matches_transformers_llama_layer():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    layer = LlamaRMSNorm(48, eps=1e-6)
    layer.weight.data = randn(48, dtype=torch.float32, seed=3)
    x = randn(4, 48, dtype=torch.float32)
    assert_close(rms_norm(x, layer.weight.data, 1e-6), layer(x).detach())


def test_bad_inputs_are_named():
    x = torch.zeros(2, 8)
    with pytest.raises(ValueError, match="even"):
        silu_and_mul(torch.zeros(2, 7))
    with pytest.raises(ValueError, match="weight"):
        rms_norm(x, torch.ones(7), 1e-6)
    with pytest.raises(ValueError, match="residual"):
        fused_add_rms_norm(x, torch.zeros(3, 8), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="x must have 2 dimensions"):   # no 3-D residual
        fused_add_rms_norm(torch.zeros(2, 2, 8), torch.zeros(2, 2, 8), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="last dimension"):
        rms_norm(torch.zeros(8, 2).t(), torch.ones(8), 1e-6)


@pytest.mark.gpu
def test_gpu_llama3_shapes(cuda):
    x = randn(300, 2 * 14336, dtype=torch.bfloat16, device=cuda)
    assert_close(silu_and_mul(x), silu_and_mul_ref(x))
    h, res = (randn(300, 4096, dtype=torch.bfloat16, device=cuda, seed=s) for s in (1, 2))
    w = randn(4096, dtype=torch.bfloat16, device=cuda, seed=3)
    normed, new_res = fused_add_rms_norm(h, res, w, 1e-5)
    ref_normed, ref_res = fused_add_rms_norm_ref(h, res, w, 1e-5)
    assert_same_sum(new_res, ref_res)
    assert_close(normed, ref_normed)
    assert_close(rms_norm(h, w, 1e-5), rms_norm_ref(h, w, 1e-5))
    qkv = randn(300, 32 + 8 + 8, 128, dtype=torch.bfloat16, device=cuda, seed=4)
    head_w = randn(128, dtype=torch.bfloat16, device=cuda, seed=5)
    assert_close(rms_norm(qkv[:, :32], head_w, 1e-6), rms_norm_ref(qkv[:, :32], head_w, 1e-6))
