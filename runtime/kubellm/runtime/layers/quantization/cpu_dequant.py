"""A quantized layer's weights for one call on the CPU, dequantized into buffers that the
next call reuses.

On the CPU a quantized linear dequantizes its weights per call, then does one matmul
(there is no fused kernel). ``quant_layout.dequantize``, the reference, allocates fresh
temporaries for each step of the unpacking (codes as int32, then uint8, then float), and
the CPU allocator returns every large block to the OS, so each call pays page faults on
new memory besides its arithmetic: for the embedded SmolLM2-135M's gate+up (576 x 3072)
1.76 ms, against 0.54 ms into reused buffers, with the same bits (addcmul of the same
fp32 operands); 126 against 19 ms at 4096 x 4096. The buffers (int32 codes, fp32
weights, and the activations' dtype when it is not fp32) grow to the largest layer and
belong to the calling thread. The weights returned are valid until that thread's next
call.
"""
from __future__ import annotations

import threading

import torch

from kubellm.kernels.quant_layout import codes_per_word, dequantize

_LOCAL = threading.local()


def _buffer(name: str, numel: int, dtype: torch.dtype) -> torch.Tensor:
    """This thread's flat buffer ``name`` of at least ``numel`` elements of ``dtype``."""
    buffers = getattr(_LOCAL, "buffers", None)
    if buffers is None:
        buffers = _LOCAL.buffers = {}
    held = buffers.get((name, dtype))
    if held is None or held.numel() < numel:
        # a normal tensor even when the first call comes under inference_mode (the
        # engine's forward): an inference tensor could not be written by a later call
        # outside it
        with torch.inference_mode(False):
            held = buffers[(name, dtype)] = torch.empty(numel, dtype=dtype)
    return held[:numel]


def dequantize_reusing(qweight: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor,
                       group_size: int, bits: int, g_idx: torch.Tensor | None,
                       dtype: torch.dtype) -> torch.Tensor:
    """W [K, N] in ``dtype``, the same values as ``quant_layout.dequantize``, in this
    thread's buffers. Act-order weights, and K not a whole number of groups, take the
    reference."""
    pack = codes_per_word(bits)
    words, n = qweight.shape
    k = words * pack
    if g_idx is not None or k % group_size or qweight.device.type != "cpu":
        return dequantize(qweight, scales, biases, group_size, bits, g_idx, dtype=dtype)
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)[None, :, None]
    codes = _buffer("codes", k * n, torch.int32).view(words, pack, n)
    torch.bitwise_right_shift(qweight.unsqueeze(1), shifts, out=codes)
    codes.bitwise_and_((1 << bits) - 1)   # (the sign bits the shifts bring in go)
    weights = _buffer("weights", k * n, torch.float32).view(k // group_size, group_size, n)
    weights.copy_(codes.view(k // group_size, group_size, n))
    torch.addcmul(biases.float().unsqueeze(1), weights, scales.float().unsqueeze(1),
                  out=weights)
    weights = weights.view(k, n)
    if dtype == torch.float32:
        return weights
    return _buffer("rounded", k * n, dtype).view(k, n).copy_(weights)
