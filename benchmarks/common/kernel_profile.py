"""Device time per kernel from torch's profiler, grouped into the parts of a decode step
(GEMMs, attention, norms, rotary, KV write, activation, the rest), and the text table of
the top kernels that a results README quotes."""
from __future__ import annotations

import torch

# substring of a kernel's name -> part of the step; first match wins (cuBLAS names its
# Hopper GEMMs nvjet_* or sm90_xmma_gemm_*, CUTLASS cutlass_*, a GEMV gemv*)
CATEGORIES = (
    ("_rotary_kv_write", "rotary+kv_write"),
    ("_paged_attention", "attention"), ("_merge_splits", "attention"),
    ("_prefill_attention", "attention"), ("flash", "attention"), ("fmha", "attention"),
    ("rms_norm", "norm"), ("_rotary", "rotary"), ("_write_kv_cache", "kv_write"),
    ("silu", "activation"),
    ("gemm", "gemm"), ("nvjet", "gemm"), ("cutlass", "gemm"), ("xmma", "gemm"),
    ("gemv", "gemm"), ("splitK", "gemm"),
)


def category(kernel_name: str) -> str:
    lowered = kernel_name.lower()
    for needle, name in CATEGORIES:
        if needle.lower() in lowered:
            return name
    return "other"


def _device_us(event) -> float:
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, attr, None)
        if value:
            return float(value)
    return 0.0


def profile_steps(step, num_steps: int, device: str) -> tuple[dict, str]:
    """Run ``step`` ``num_steps`` times under the profiler (eagerly: the kernels' device
    times are what a graph replays). Returns ({kernel: ms per step}, the top-25 table)."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        for _ in range(num_steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    averages = prof.key_averages()
    per_kernel = {}
    for event in averages:
        us = _device_us(event) if device == "cuda" else 0.0
        if us > 0:
            per_kernel[event.key] = us / num_steps / 1e3
    if device != "cuda":   # no device: the CPU ops stand in, so the smoke run has rows
        per_kernel = {e.key: e.self_cpu_time_total / num_steps / 1e3 for e in averages
                      if e.key.startswith("aten::") and e.self_cpu_time_total > 0}
    sort_key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    try:
        table = averages.table(sort_by=sort_key, row_limit=25)
    except Exception:   # older/newer profilers name the column differently
        table = averages.table(sort_by="self_device_time_total", row_limit=25)
    return per_kernel, table


def by_category(per_kernel: dict) -> dict:
    totals: dict[str, float] = {}
    for name, ms in per_kernel.items():
        part = category(name)
        totals[part] = totals.get(part, 0.0) + ms
    return {k: round(v, 4) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def top_kernels(per_kernel: dict, n: int = 15) -> list[dict]:
    rows = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:n]
    return [{"kernel": name[:120], "category": category(name), "ms_per_step": round(ms, 4)}
            for name, ms in rows]
