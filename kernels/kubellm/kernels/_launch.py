"""Shared launcher plumbing: check that a kernel can run on the inputs' device, check arguments.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, and its own
library functions (``tl.max``, ``tl.cdiv``...) are decorated when ``triton`` is first
imported. So CPU tensors can only run kernels if that variable was set before the first
``import triton`` of the process (tests/conftest.py does it on machines without CUDA).
A kernel compiled for the GPU cannot run on CPU tensors; we say so instead of letting
triton fail with an obscure message.
"""
import torch
import triton
from triton.runtime.interpreter import InterpretedFunction


def is_interpreted(kernel) -> bool:
    """True when `kernel` (a ``@triton.jit`` function) runs in triton's CPU interpreter."""
    return isinstance(kernel, InterpretedFunction)


def row_bucket(m: int) -> int:
    """The autotuners' row key for the W4A16 kernels: decode rows per tile (16, 32, 64),
    then prefill sizes up to 1024 (larger ones tile alike), so CUDA-graph capture of many
    batch sizes tunes a handful of times."""
    return min(1024, max(16, triton.next_power_of_2(m)))


def kernel_for(kernel, device: torch.device, tuned=None):
    """The kernel to launch for tensors on `device`: `tuned` (an autotuned wrapper of
    `kernel`) when compiled for CUDA, else `kernel` itself."""
    if is_interpreted(kernel):
        return kernel
    if device.type != "cuda":
        raise RuntimeError(
            f"{kernel.__name__}: tensors on {device} run only under triton's interpreter; set "
            "TRITON_INTERPRET=1 before triton is first imported in this process")
    return tuned if tuned is not None else kernel


def check_tensor(name: str, t, ndim: int, dtypes=None, device=None, last_dim_contiguous=True):
    """Raise a ValueError/TypeError naming `name` when `t` is not what a kernel needs."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if dtypes is not None and t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must have dtype {allowed}, got {str(t.dtype).replace('torch.', '')}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but the other inputs are on {device}")
    if last_dim_contiguous and t.numel() > 0 and t.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension, got strides {t.stride()}")


def check_contiguous(name: str, t: torch.Tensor):
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got shape {tuple(t.shape)} strides {t.stride()}")


def check_shape(name: str, t: torch.Tensor, expected: tuple):
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(t.shape)}")


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

def check_kv_cache(k_cache, v_cache, dtype: torch.dtype, device: torch.device):
    """Both caches [num_blocks, block_size, Hkv, D], contiguous, same shape, in `dtype`
    or both in FP8 E4M3 (kv_cache_fp8.py)."""
    allowed = (dtype, torch.float8_e4m3fn)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(name, cache, 4, allowed, device)
    if v_cache.dtype != k_cache.dtype:
        raise TypeError(f"v_cache dtype {v_cache.dtype} != k_cache dtype {k_cache.dtype}")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_contiguous(name, cache)
    check_shape("v_cache", v_cache, k_cache.shape)


# (atol, rtol) for ops that round their fp32 result once to the output dtype.
ELEMENTWISE_TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3),
                          torch.bfloat16: (1e-2, 1e-2)}
