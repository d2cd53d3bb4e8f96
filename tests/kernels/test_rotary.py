"""apply_rotary and build_cos_sin_cache against the reference and transformers."""
import pytest
import torch

from kubellm.kernels.rotary import TOLERANCES, apply_rotary, apply_rotary_ref, build_cos_sin_cache

LLAMA31_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def randn(*shape, dtype, seed=0, device="cpu"):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)


def transformers_inv_freq(head_dim, base, scaling):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    rope = {"rope_theta": base, **(scaling or {"rope_type": "default"})}
    config = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=131072, rope_parameters=rope)
    if scaling is None:
        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)[0]
    return ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config)[0]


@pytest.mark.parametrize("scaling", [None, LLAMA31_SCALING], ids=["default", "llama3"])
def test_cos_sin_cache_matches_transformers(scaling):
    head_dim, base = 128, 500000.0
    inv_freq = transformers_inv_freq(head_dim, base, scaling)
    positions = torch.tensor([0, 1, 17, 8191, 8192, 100000], dtype=torch.float32)
    freqs = positions[:, None] * inv_freq[None, :]
    expected = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    cache = build_cos_sin_cache(head_dim, 131072, base, scaling)
    assert cache.shape == (131072, head_dim) and cache.dtype == torch.float32
    torch.testing.assert_close(cache[positions.long()], expected, atol=0, rtol=0)
    if scaling is not None:  # the scaling must actually change the low frequencies
        assert not torch.allclose(cache[100000], build_cos_sin_cache(head_dim, 131072, base)[100000])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_apply_rotary_matches_reference(dtype):
    cache = build_cos_sin_cache(16, 64, 10000.0)
    positions = torch.tensor([0, 5, 63, 2, 2], dtype=torch.int64)
    q, k = randn(5, 6, 16, dtype=dtype), randn(5, 2, 16, dtype=dtype, seed=1)
    q_rot, k_rot = apply_rotary(positions, q, k, cache)
    q_ref, k_ref = apply_rotary_ref(positions, q, k, cache)
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(q_rot, q_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(k_rot, k_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(q_rot[0], q[0], atol=atol, rtol=rtol)  # position 0: identity


def test_apply_rotary_matches_transformers_on_strided_views():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    cache = build_cos_sin_cache(32, 40, 10000.0, LLAMA31_SCALING | {"original_max_position_embeddings": 16})
    positions = torch.tensor([3, 39, 0, 12], dtype=torch.int64)
    qkv = randn(4, 4 + 2 + 2, 32, dtype=torch.float32)
    q, k = qkv[:, :4], qkv[:, 4:6]  # views of a fused projection, as the engine passes
    q_rot, k_rot = apply_rotary(positions, q, k, cache)
    cos = cache[positions, :16].repeat(1, 2)[None]  # HF layout: [batch, seq, D]
    sin = cache[positions, 16:].repeat(1, 2)[None]
    q_hf, k_hf = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    torch.testing.assert_close(q_rot, q_hf[0].transpose(0, 1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k_rot, k_hf[0].transpose(0, 1), atol=1e-5, rtol=1e-5)


def test_bad_inputs_are_named():
    cache = build_cos_sin_cache(16, 8, 10000.0)
    q, k = torch.zeros(2, 2, 16), torch.zeros(2, 1, 16)
    with pytest.raises(TypeError, match="positions"):
        apply_rotary(torch.zeros(2, dtype=torch.int32), q, k, cache)
    with pytest.raises(ValueError, match="cos_sin_cache"):
        apply_rotary(torch.zeros(2, dtype=torch.int64), q, k, build_cos_sin_cache(32, 8, 1e4))
    with pytest.raises(ValueError, match="not supported"):
        build_cos_sin_cache(16, 8, 1e4, {"rope_type": "yarn", "factor": 2.0})
    with pytest.raises(ValueError, match="low_freq_factor"):
        build_cos_sin_cache(16, 8, 1e4, {"rope_type": "llama3", "factor": 8.0})


@pytest.mark.gpu
def test_gpu_llama3_shape(cuda):
    cache = build_cos_sin_cache(128, 32768, 500000.0, LLAMA31_SCALING, device=cuda)
    positions = torch.randint(0, 32768, (512,), device=cuda)
    q = randn(512, 32, 128, dtype=torch.bfloat16, device=cuda)
    k = randn(512, 8, 128, dtype=torch.bfloat16, seed=1, device=cuda)
    atol, rtol = TOLERANCES[torch.bfloat16]
    for got, want in zip(apply_rotary(positions, q, k, cache), apply_rotary_ref(positions, q, k, cache)):
        torch.testing.assert_close(got, want, atol=atol, rtol=rtol)
