"""write_kv_cache against its reference: an exact copy, slots < 0 skipped."""
import pytest
import torch

from kubellm.kernels.reshape_and_cache import write_kv_cache, write_kv_cache_ref


def run_both(num_tokens, num_blocks, block_size, num_kv_heads, head_dim, dtype, slots, device="cpu"):
    gen = torch.Generator().manual_seed(0)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(dtype).to(device)
    v_cache = torch.randn(shape, generator=gen).to(dtype).to(device)
    key = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype).to(device)
    value = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype).to(device)
    slot_mapping = torch.tensor(slots, dtype=torch.int64, device=device)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    write_kv_cache(key, value, k_cache, v_cache, slot_mapping)
    write_kv_cache_ref(key, value, k_ref, v_ref, slot_mapping)
    torch.testing.assert_close(k_cache, k_ref, atol=0, rtol=0)
    torch.testing.assert_close(v_cache, v_ref, atol=0, rtol=0)
    return k_cache, key


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_writes_slots_and_skips_negative(dtype):
    k_cache, key = run_both(5, 8, 4, 2, 16, dtype, slots=[0, 5, -1, 31, 6])
    assert torch.equal(k_cache[7, 3], key[3])  # slot 31 = block 7, offset 3


def test_odd_head_count_and_top_of_pool():
    run_both(3, 4096, 4, 3, 32, torch.float32, slots=[4096 * 4 - 1, 4095 * 4, -1])


def test_strided_key_value_views():
    qkv = torch.randn(4, 3, 2, 16)  # fused projection output, split without copying
    k_cache = torch.zeros(4, 4, 2, 16)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.tensor([3, 2, 1, 0])
    write_kv_cache(qkv[:, 1], qkv[:, 2], k_cache, v_cache, slots)
    assert torch.equal(k_cache[0, [3, 2, 1, 0]], qkv[:, 1])
    assert torch.equal(v_cache[0, [3, 2, 1, 0]], qkv[:, 2])


def test_bad_inputs_are_named():
    k_cache = torch.zeros(4, 4, 2, 16)
    key = torch.zeros(2, 2, 16)
    with pytest.raises(TypeError, match="slot_mapping"):
        write_kv_cache(key, key, k_cache, k_cache.clone(), torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="slot_mapping"):
        write_kv_cache(key, key, k_cache, k_cache.clone(), torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="heads/head_dim"):
        write_kv_cache(torch.zeros(2, 1, 16), torch.zeros(2, 1, 16), k_cache, k_cache.clone(),
                       torch.zeros(2, dtype=torch.int64))
    with pytest.raises(TypeError, match="v_cache"):
        write_kv_cache(key, key, k_cache, k_cache.half(), torch.zeros(2, dtype=torch.int64))


@pytest.mark.gpu
def test_gpu_llama3_shape_large_pool(cuda):
    # 140,000 blocks: slot * element stride of the top blocks passes 2^31.
    num_blocks, block_size = 140_000, 16
    top = num_blocks * block_size
    slots = [top - 1, top - 17, -1, 5, top - 1000] + list(range(top - 300, top - 200))
    run_both(len(slots), num_blocks, block_size, 8, 128, torch.bfloat16, slots, device=cuda)
