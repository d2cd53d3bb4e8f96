"""The CPU forward's per-call dequantization into reused buffers: bit-equal to the
reference (quant_layout.dequantize) for every layout it takes, the reference itself for
those it does not, and buffers that grow, belong to one thread and are reused."""
import threading

import pytest
import torch

from kubellm.kernels.quant_layout import dequantize, pack_codes
from kubellm.runtime.layers.quantization import cpu_dequant
from kubellm.runtime.layers.quantization.cpu_dequant import dequantize_reusing


def weight(k, n, bits=4, group_size=32, dtype=torch.float32, act_order=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 2 ** bits, (k, n), generator=gen)
    scales = (torch.rand(k // group_size, n, generator=gen) * 0.01 + 1e-3).to(dtype)
    biases = (torch.randn(k // group_size, n, generator=gen) * 0.02).to(dtype)
    g_idx = (torch.randperm(k, generator=gen) // group_size).int() if act_order else None
    return pack_codes(codes, bits), scales, biases, group_size, bits, g_idx


@pytest.mark.parametrize("k, n, bits, group_size", [
    (64, 48, 4, 32), (576, 96, 4, 32), (256, 40, 4, 128), (64, 24, 8, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_equal_to_the_reference_bit_for_bit(k, n, bits, group_size, dtype):
    args = weight(k, n, bits, group_size, dtype, seed=k + n)
    got = dequantize_reusing(*args, dtype)
    assert got.dtype == dtype and got.shape == (k, n)
    assert torch.equal(got, dequantize(*args, dtype=dtype))


def test_codes_0_and_15_at_every_position_of_a_word():
    q, s, b, g, bits, _ = weight(64, 16)
    for word in (0, -1):    # all codes 0; all codes 15 (the sign bit set)
        w = torch.full_like(q, word)
        assert torch.equal(dequantize_reusing(w, s, b, g, bits, None, torch.float32),
                           dequantize(w, s, b, g, bits))


def test_act_order_and_partial_groups_take_the_reference(monkeypatch):
    calls = []
    real = cpu_dequant.dequantize
    monkeypatch.setattr(cpu_dequant, "dequantize", lambda *a, **kw: calls.append(a[3]) or
                        real(*a, **kw))
    args = weight(64, 16, act_order=True)
    assert torch.equal(dequantize_reusing(*args, torch.float32), real(*args))
    q, s, b, _, bits, _ = weight(96, 16, group_size=32)
    # groups of 64 over K=96: the last group is partial (scales hold two groups)
    s2, b2 = s[:2], b[:2]
    assert torch.equal(dequantize_reusing(q, s2, b2, 64, bits, None, torch.float32),
                       real(q, s2, b2, 64, bits))
    assert calls == [32, 64]


def test_buffers_are_reused_grown_and_per_thread():
    small, large = weight(64, 16), weight(128, 64, seed=1)
    first = dequantize_reusing(*small, torch.float32)
    again = dequantize_reusing(*small, torch.float32)
    assert again.data_ptr() == first.data_ptr()          # the same buffer, refilled
    grown = dequantize_reusing(*large, torch.float32)
    assert torch.equal(grown, dequantize(*large))
    assert torch.equal(dequantize_reusing(*small, torch.float32), dequantize(*small))
    seen = []
    thread = threading.Thread(target=lambda: seen.append(
        dequantize_reusing(*large, torch.float32).data_ptr()))
    thread.start()
    thread.join()
    assert seen and seen[0] != grown.data_ptr()          # another thread, its own buffer


def test_buffers_made_under_inference_mode_serve_calls_outside_it_and_back():
    """The engine's forward runs under inference_mode; a layer called outside it later
    (a test, a benchmark) writes the same buffers."""
    import kubellm.runtime.layers.quantization.cpu_dequant as module
    module._LOCAL.buffers = {}     # this thread's buffers made afresh, inside
    args = weight(64, 16, seed=5)
    with torch.inference_mode():
        inside = dequantize_reusing(*args, torch.bfloat16)
        assert torch.equal(inside, dequantize(*args, dtype=torch.bfloat16))
    assert torch.equal(dequantize_reusing(*args, torch.bfloat16),
                       dequantize(*args, dtype=torch.bfloat16))
    with torch.inference_mode():
        assert torch.equal(dequantize_reusing(*args, torch.float32), dequantize(*args))
