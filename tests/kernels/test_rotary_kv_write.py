"""rotary_kv_write (rotary fused into the KV-cache write) against its reference and
against the two kernels it replaces (apply_rotary, then write_kv_cache)."""
import pytest
import torch

from kubellm.kernels.reshape_and_cache import write_kv_cache
from kubellm.kernels.rotary import apply_rotary, build_cos_sin_cache
from kubellm.kernels.rotary_kv_write import TOLERANCES, rotary_kv_write, rotary_kv_write_ref


def make_step(num_tokens, num_heads, num_kv_heads, head_dim, num_blocks, block_size, dtype,
              slots, device="cpu", max_position=64):
    """A fused qkv projection output split into strided views, as the model passes them."""
    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(num_tokens, num_heads + 2 * num_kv_heads, head_dim, generator=gen)
    qkv = qkv.to(dtype).to(device)
    q, k, v = qkv.split([num_heads, num_kv_heads, num_kv_heads], dim=1)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    torch.manual_seed(1)  # the caches are drawn where they live: GPU pools are 9 GB
    caches = [torch.randn(shape, device=device).to(dtype) for _ in range(2)]
    positions = torch.randint(0, max_position, (num_tokens,), generator=gen).to(device)
    cos_sin = build_cos_sin_cache(head_dim, max_position, 10000.0, device=device)
    slot_mapping = torch.tensor(slots, dtype=torch.int64, device=device)
    return positions, q, k, v, caches[0], caches[1], slot_mapping, cos_sin


def assert_matches_reference(step, return_key=False):
    positions, q, k, v, k_cache, v_cache, slots, cos_sin = step
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    got = rotary_kv_write(positions, q, k, v, k_cache, v_cache, slots, cos_sin,
                          return_key=return_key)
    want = rotary_kv_write_ref(positions, q, k, v, k_ref, v_ref, slots, cos_sin,
                               return_key=return_key)
    atol, rtol = TOLERANCES[q.dtype]
    for g, w in zip(got if return_key else [got], want if return_key else [want]):
        torch.testing.assert_close(g, w, atol=atol, rtol=rtol)
    torch.testing.assert_close(k_cache, k_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(v_cache, v_ref, atol=0, rtol=0)  # a plain copy
    return k_cache, v_cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matches_reference_and_skips_negative_slots(dtype):
    step = make_step(5, 6, 2, 16, 8, 4, dtype, slots=[0, 5, -1, 31, 6])
    before = step[4].clone()
    k_cache, _ = assert_matches_reference(step)
    assert torch.equal(k_cache[0, 2], before[0, 2])          # no token maps there
    assert not torch.equal(k_cache[7, 3], before[7, 3])       # slot 31: block 7, offset 3


def test_returned_keys_are_the_written_keys():
    step = make_step(4, 4, 2, 32, 4, 4, torch.float32, slots=[3, 2, 1, 0])
    q_rot, k_rot = rotary_kv_write(*step, return_key=True)
    assert torch.equal(step[4][0, [3, 2, 1, 0]], k_rot)
    assert_matches_reference(make_step(4, 4, 2, 32, 4, 4, torch.float32, slots=[3, 2, 1, 0]),
                             return_key=True)


@pytest.mark.parametrize("num_heads,num_kv_heads", [(3, 3), (8, 1), (6, 2)])
def test_same_result_as_the_unfused_kernels(num_heads, num_kv_heads):
    step = make_step(6, num_heads, num_kv_heads, 16, 16, 4, torch.float16,
                     slots=[60, 3, 17, -1, 0, 41])
    positions, q, k, v, k_cache, v_cache, slots, cos_sin = step
    k_unfused, v_unfused = k_cache.clone(), v_cache.clone()
    q_fused = rotary_kv_write(*step)
    q_rot, k_rot = apply_rotary(positions, q, k, cos_sin)
    write_kv_cache(k_rot, v, k_unfused, v_unfused, slots)
    # the same fp32 arithmetic in the same order: equal on the interpreter and the GPU
    torch.testing.assert_close(q_fused, q_rot, atol=0, rtol=0)
    torch.testing.assert_close(k_cache, k_unfused, atol=0, rtol=0)
    torch.testing.assert_close(v_cache, v_unfused, atol=0, rtol=0)


def test_top_of_a_large_pool_and_empty_step():
    assert_matches_reference(make_step(3, 2, 1, 16, 4096, 4, torch.float32,
                                       slots=[4096 * 4 - 1, 4095 * 4, -1]))
    empty = make_step(0, 2, 1, 16, 4, 4, torch.float32, slots=[])
    assert rotary_kv_write(*empty).shape == (0, 2, 16)


def test_bad_inputs_are_named():
    positions, q, k, v, k_cache, v_cache, slots, cos_sin = make_step(
        2, 2, 1, 16, 4, 4, torch.float32, slots=[0, 1])
    with pytest.raises(TypeError, match="slot_mapping"):
        rotary_kv_write(positions, q, k, v, k_cache, v_cache, slots.int(), cos_sin)
    with pytest.raises(ValueError, match="positions"):
        rotary_kv_write(positions[:1], q, k, v, k_cache, v_cache, slots, cos_sin)
    with pytest.raises(TypeError, match="v_cache"):
        rotary_kv_write(positions, q, k, v, k_cache, v_cache.half(), slots, cos_sin)
    with pytest.raises(ValueError, match="cos_sin_cache"):
        rotary_kv_write(positions, q, k, v, k_cache, v_cache, slots,
                        build_cos_sin_cache(32, 8, 1e4))
    with pytest.raises(ValueError, match="heads/head_dim"):
        rotary_kv_write(positions, q, k, v, torch.zeros(4, 4, 2, 16), torch.zeros(4, 4, 2, 16),
                        slots, cos_sin)


@pytest.mark.gpu
def test_gpu_llama3_shape_large_pool(cuda):
    # Llama-3-8B heads; 140,000 blocks: element offsets of the top blocks pass 2^31.
    slots = torch.randperm(140_000 * 16)[:512].tolist()
    slots[:2] = [140_000 * 16 - 1, -1]
    step = make_step(512, 32, 8, 128, 140_000, 16, torch.bfloat16, slots, device=cuda,
                     max_position=32768)
    assert_matches_reference(step, return_key=True)
