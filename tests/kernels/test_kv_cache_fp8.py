"""An FP8 (E4M3) KV cache through every kernel that writes or reads it: the writers store
exactly torch's saturating cast, the readers agree with their references on the same
cache, and attention over the FP8 cache stays close to attention over the float one."""
import pytest
import torch

from kubellm.kernels.kv_fp8_format import KV_FP8_DTYPE, to_fp8
from kubellm.kernels.paged_attention import TOLERANCES, paged_attention, paged_attention_ref
from kubellm.kernels.prefill_attention import prefill_attention, prefill_attention_ref
from kubellm.kernels.reshape_and_cache import write_kv_cache, write_kv_cache_ref
from kubellm.kernels.rotary_kv_write import rotary_kv_write, rotary_kv_write_ref
from tests.kernels.test_paged_attention import MIXED, make_batch
from tests.kernels.test_prefill_attention import MIXED as PREFILL_MIXED, add_new_keys
from tests.kernels.test_rotary_kv_write import make_step

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def fp8_caches(batch):
    """The batch with its caches stored in FP8 (what was written there, rounded)."""
    return {**batch, "k_cache": to_fp8(batch["k_cache"]), "v_cache": to_fp8(batch["v_cache"])}


def values_over_every_exponent(n, dtype, device="cpu"):
    """Keys spanning E4M3's subnormals (< 2^-6) to past its largest value (448)."""
    gen = torch.Generator().manual_seed(0)
    magnitude = torch.exp2(torch.randint(-12, 10, (n,), generator=gen).float())
    x = torch.randn(n, generator=gen) * magnitude
    x[:6] = torch.tensor([0.0, 447.9, 448.0, 1000.0, -1e4, 7.85])  # 7.85: rounds up to 8
    return x.to(dtype).to(device)


@pytest.mark.parametrize("dtype", FLOATS)
def test_the_write_stores_torchs_saturating_cast(dtype):
    tokens, heads, dim = 256, 2, 16
    key = values_over_every_exponent(tokens * heads * dim, dtype).view(tokens, heads, dim)
    value = -key.flip(0)
    k_cache = torch.zeros(tokens // 4, 4, heads, dim, dtype=KV_FP8_DTYPE)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.randperm(tokens, generator=torch.Generator().manual_seed(1))
    skipped, slots[3] = int(slots[3]), -1
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    write_kv_cache(key, value, k_cache, v_cache, slots)
    write_kv_cache_ref(key, value, k_ref, v_ref, slots)
    assert torch.equal(k_cache.float(), k_ref.float())
    assert torch.equal(v_cache.float(), v_ref.float())
    written = k_cache.view(-1, heads, dim)[slots[4]]
    assert torch.equal(written.float(), key[4].float().clamp(-448, 448).to(KV_FP8_DTYPE).float())
    assert k_cache.float().abs().max() == 448.0 and not k_cache.float().isnan().any()
    assert (k_cache.view(-1, heads, dim)[skipped].float() == 0).all()   # slot -1: not written


@pytest.mark.parametrize("dtype", FLOATS)
def test_rotary_write_rounds_keys_once_more_into_fp8(dtype):
    positions, q, k, v, k_cache, v_cache, slots, cos_sin = make_step(
        40, 6, 2, 32, 16, 4, dtype, slots=list(range(39)) + [-1])
    k_cache, v_cache = to_fp8(k_cache), to_fp8(v_cache)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    q_rot, k_rot = rotary_kv_write(positions, q, k, v, k_cache, v_cache, slots, cos_sin,
                                   return_key=True)
    q_want, k_want = rotary_kv_write_ref(positions, q, k, v, k_ref, v_ref, slots, cos_sin,
                                         return_key=True)
    assert q_rot.dtype == k_rot.dtype == dtype   # the returned keys keep the model dtype
    torch.testing.assert_close(k_rot, k_want, atol=1e-2, rtol=1e-2)
    assert torch.equal(v_cache.float(), v_ref.float())          # one rounding, the same
    # the cached keys are exactly the returned keys (model dtype) cast to FP8 ...
    written = k_cache.view(-1, *k_cache.shape[2:])[slots[:-1]]
    assert torch.equal(written.float(), to_fp8(k_rot[:-1]).float())
    # ... and the reference's within one E4M3 step (1/8 relative): its keys may differ
    # by a model-dtype ulp (bf16: half of them), which can cross an FP8 rounding boundary
    torch.testing.assert_close(k_cache.float(), k_ref.float(), atol=2 ** -9, rtol=0.125)


@pytest.mark.parametrize("dtype", FLOATS)
def test_paged_attention_reads_the_fp8_cache_like_its_reference(dtype):
    batch = fp8_caches(make_batch(**MIXED, dtype=dtype))
    out = paged_attention(**batch)
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(out, paged_attention_ref(**batch), atol=atol, rtol=rtol)


@pytest.mark.parametrize("num_kv_splits", [1, 4])
def test_decodes_over_fp8_stay_close_to_the_float_cache(num_kv_splits):
    batch = make_batch(q_lens=[1] * 4, seq_lens=[5, 37, 64, 19], dtype=torch.bfloat16)
    exact = paged_attention_ref(**batch)
    ours = paged_attention(**fp8_caches(batch), num_kv_splits=num_kv_splits)
    # E4M3 keeps 3 mantissa bits (relative error <= 1/16 per element); averaged over
    # a softmax of tens of keys the output moves by a few percent of its norm
    error = (ours.float() - exact.float()).norm() / exact.float().norm()
    assert error < 0.06, error


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefill_attention_with_fp8_context(dtype):
    batch = add_new_keys(make_batch(**PREFILL_MIXED, dtype=dtype))
    batch = fp8_caches(batch)
    out = prefill_attention(**batch)
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(out, prefill_attention_ref(**batch), atol=atol, rtol=rtol)


def test_caches_of_different_dtypes_are_refused():
    batch = make_batch(**MIXED)
    with pytest.raises(TypeError, match="v_cache dtype"):
        paged_attention(**{**batch, "k_cache": to_fp8(batch["k_cache"])})
    with pytest.raises(TypeError, match="k_cache must have dtype float32, float8_e4m3fn"):
        paged_attention(**{**batch, "k_cache": batch["k_cache"].half()})


@pytest.mark.gpu
@pytest.mark.parametrize("use_tma", [False, True])
def test_gpu_fp8_cache_llama3_shape(cuda, use_tma):
    """The hardware's float -> E4M3 conversion is torch's cast; attention reads it back."""
    key = values_over_every_exponent(4096 * 8 * 128, torch.bfloat16, cuda).view(4096, 8, 128)
    k_cache = torch.zeros(512, 16, 8, 128, dtype=KV_FP8_DTYPE, device=cuda)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.randperm(512 * 16, device=cuda)[:4096]
    write_kv_cache(key, key, k_cache, v_cache, slots)
    assert torch.equal(k_cache.view(-1, 8, 128)[slots].float(), to_fp8(key).float())
    shapes = dict(q_lens=[1] * 8 + [300, 77], seq_lens=[900, 33, 4000, 1, 17, 2048, 64, 5,
                                                        1200, 77])
    batch = make_batch(**shapes, num_heads=32, num_kv_heads=8, head_dim=128, block_size=16,
                       num_blocks=2048, dtype=torch.bfloat16, device=cuda)
    fp8 = fp8_caches(batch)
    atol, rtol = TOLERANCES[torch.bfloat16]
    torch.testing.assert_close(paged_attention(**fp8), paged_attention_ref(**fp8),
                               atol=atol, rtol=rtol)
    fp8 = fp8_caches(add_new_keys(batch))
    torch.testing.assert_close(prefill_attention(**fp8, use_tma=use_tma),
                               prefill_attention_ref(**fp8), atol=atol, rtol=rtol)
