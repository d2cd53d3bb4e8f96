"""The FP8 KV cache's storage format in plain torch (no triton: the torch attention
backend and the kernels' references use it): E4M3, scale 1.0, saturated at +-448.
kv_cache_fp8.py says why and holds the kernels' side."""
import torch

KV_FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0   # torch.finfo(torch.float8_e4m3fn).max


def is_fp8(cache: torch.Tensor) -> bool:
    return cache.dtype == KV_FP8_DTYPE


def to_fp8(x: torch.Tensor) -> torch.Tensor:
    """x (any float dtype) -> E4M3, saturated."""
    return x.float().clamp(-FP8_MAX, FP8_MAX).to(KV_FP8_DTYPE)


def to_cache_dtype(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    """x as the cache stores it (FP8 saturated, anything else cast)."""
    return to_fp8(x) if is_fp8(cache) else x.to(cache.dtype)


def storage_view(t: torch.Tensor) -> torch.Tensor:
    """The tensor as raw bytes where torch's CPU indexing ops lack FP8 kernels
    (index_copy_, index_put_); other dtypes as they are."""
    return t.view(torch.uint8) if is_fp8(t) else t
