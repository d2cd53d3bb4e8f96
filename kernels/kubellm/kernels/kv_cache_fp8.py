"""The FP8 KV cache's storage format: E4M3 (``torch.float8_e4m3fn``), scale 1.0.

A key or value is stored as the E4M3 number nearest to it, saturated at +-448 (E4M3 has
no infinity: an unclamped cast of a larger value would be NaN or 448 depending on the
converter). Readers widen each loaded tile to the model dtype before the dot products,
so attention still runs in bf16/fp16 with fp32 accumulation; the cache holds one byte per
element, twice the tokens of a bf16 cache in the same memory. The scale is 1.0 for every
layer, as vLLM's ``--kv-cache-dtype fp8`` uses without a calibrated checkpoint: keys and
values of the Llama-family models we run stay far below 448.

Triton's interpreter (``TRITON_INTERPRET=1``, our CPU tests) rounds float -> FP8 wrongly
when rounding carries into the exponent (7.85 becomes 4.0; 105 of 65,536 random fp32
values differ from torch's cast, triton 3.9.0), while its FP8 -> float is exact for every
finite code. Kernels that write FP8 therefore take ``EMULATE_ROUNDING`` under the
interpreter: the value is first rounded to its E4M3 neighbour in fp32 (ties to even, by
adding and subtracting a power of two whose ulp is the E4M3 quantum), so the cast itself
no longer rounds. On a GPU the cast is the hardware's. The torch side (the dtype, the
saturating cast, byte views) is kv_fp8_format.py.
"""
import triton
import triton.language as tl


@triton.jit
def round_to_e4m3(x):
    """fp32 x -> the nearest E4M3 value, ties to even, as fp32 (x already in +-448)."""
    a = tl.abs(x)
    exponent = tl.maximum((a.to(tl.int32, bitcast=True) >> 23) - 127, -6)  # subnormals: 2^-6's
    # 2^(exponent + 20) has an ulp of 2^(exponent - 3), E4M3's quantum at this exponent
    big = ((exponent + 147) << 23).to(tl.float32, bitcast=True)
    r = (a + big) - big
    return tl.where(x < 0, -r, r)


@triton.jit
def to_cache(x, cache_ptr, KV_FP8: tl.constexpr, EMULATE_ROUNDING: tl.constexpr):
    """A tile as ``cache_ptr`` stores it: FP8 saturated at +-448, or a plain cast."""
    if KV_FP8:
        x = tl.minimum(tl.maximum(x.to(tl.float32), -448.0), 448.0)
        if EMULATE_ROUNDING:
            x = round_to_e4m3(x)
    return x.to(cache_ptr.dtype.element_ty)
