"""The two ceilings every limit here is computed from, measured in the run that quotes
them (machines vary by tens of percent): a large bf16 matmul's FLOP/s and a large
device-to-device copy's bytes/s (read + written)."""
from __future__ import annotations

import time

import torch


def median_ms(fn, device: str, repeats: int = 20) -> float:
    """Median wall time of ``fn`` in ms: CUDA events through do_bench on the GPU."""
    if device == "cuda":
        from triton.testing import do_bench
        return do_bench(fn, warmup=100, rep=500, return_mode="median")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def measure_ceilings(device: str, dtype: torch.dtype) -> dict:
    """{"matmul_tflops", "copy_tb_s"}: an 8192^3 matmul and a 1 GiB copy on the GPU
    (512^3 and 16 MiB on a CPU)."""
    n = 8192 if device == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    tflops = 2 * n ** 3 / (median_ms(lambda: a @ b, device) * 1e-3) / 1e12
    src = torch.randn(2**28 if device == "cuda" else 2**22, device=device)
    dst = torch.empty_like(src)
    copy_tb_s = 2 * src.numel() * 4 / (median_ms(lambda: dst.copy_(src), device) * 1e-3) / 1e12
    del a, b, src, dst
    if device == "cuda":
        torch.cuda.empty_cache()
    # Significant digits, not decimals: a slow (or loaded) CPU must not round to 0.
    return {"matmul_tflops": float(f"{tflops:.4g}"), "copy_tb_s": float(f"{copy_tb_s:.4g}")}


def gemm_floor_ms(m: int, n: int, k: int, ceilings: dict, itemsize: int = 2) -> float:
    """The roofline of y[m, n] = x[m, k] @ w[n, k]^T: its FLOPs at the matmul rate or its
    bytes (w, x and y once) at the copy rate, whichever takes longer. At m above the
    ridge (~160 on an H200) a decode GEMM is compute-bound, not a weight read."""
    flops_ms = 2 * m * n * k / (ceilings["matmul_tflops"] * 1e12) * 1e3
    bytes_ms = itemsize * (n * k + m * k + m * n) / (ceilings["copy_tb_s"] * 1e12) * 1e3
    return max(flops_ms, bytes_ms)
