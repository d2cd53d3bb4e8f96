"""One to four rows through each weight-read-bound product, on the H200 (issues 16 and 20):
the Llama-3-8B projections (and its LM head) at batch 1, 2 and 4, each kernel's device
time per call (CUDA-graph replays over weight copies that never sit in L2) and the bytes
of weights it reads per second against the copy bandwidth measured in the same run.

- bf16: cuBLAS (F.linear);
- 4-bit (groups of 128): w4a16_gemm's "dot" variant, kernels/w4a16_gemv.py (its "gemv"
  variant), and PyTorch's int4 GEMM (tinygemm) on a repacked copy.

Each kernel's output is checked against a reference first (max abs diff printed), so a
wrong kernel cannot time well.

    python -m benchmarks.gpu.gemv --out DIR            # DIR/gemv.json
    python -m benchmarks.gpu.gemv --smoke --out DIR    # tiny shapes on the CPU (CI)
    python -m benchmarks.gpu.gemv --profile-only       # one call of each inside an NVTX
        # range "profile" (for ncu --nvtx --nvtx-include profile/), at 4096x28672, 1 row
        # (--shape KxN, --rows R, --variants gemv-tc,gemm-tc: other calls)
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from benchmarks.gpu.w4a16 import COLD_BYTES, call_us, significant

# (K, N): qkv, o, gate+up, down, LM head
SHAPES = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (4096, 128256)]
SMOKE_SHAPES = [(256, 64), (128, 96)]
ROWS, GROUP, SMOKE_GROUP = (1, 2, 4), 128, 64


def kernels(smoke: bool):
    """name -> (weight kind, call(x, weight) -> out)."""
    import torch

    from kubellm.kernels import tinygemm
    from kubellm.kernels.w4a16_gemm import w4a16_gemm
    group = SMOKE_GROUP if smoke else GROUP
    calls = {   # (kernels/dense_gemv.py, a row-dot Triton kernel, tied cuBLAS at 1 row on the
        # big shapes and lost on the small ones in call 29: removed)
        "bf16_cublas": ("dense", lambda x, w: torch.nn.functional.linear(x, w)),
        "int4_dot": ("int4", lambda x, q: w4a16_gemm(x, *q, group, 4, variant="dot")),
        # (call 29 also timed w4a16_gemm's first gemv kernel, since replaced by this one)
        "int4_gemv": ("int4", lambda x, q: w4a16_gemm(x, *q, group, 4, variant="gemv")),
    }
    if not smoke:
        calls["int4_tinygemm"] = ("tinygemm", lambda x, p: tinygemm.int4pack_mm(x, *p, group))
    return calls


def make_weights(k: int, n: int, device: str, dtype, copies_of, smoke: bool) -> dict:
    import torch

    from kubellm.kernels import tinygemm
    from kubellm.kernels.quant_layout import pack_codes
    group = SMOKE_GROUP if smoke else GROUP
    gen = torch.Generator().manual_seed(k + n)
    dense = (torch.randn(n, k, generator=gen) * 0.02).to(dtype)
    codes = torch.randint(0, 16, (k, n), generator=gen)
    scales = torch.rand(k // group, n, generator=gen) * 0.004 + 0.001
    quant = (pack_codes(codes, 4), scales.to(dtype), (-8 * scales).to(dtype))
    dense_bytes = dense.numel() * dense.element_size()
    int4_bytes = quant[0].numel() * 4 + 2 * quant[1].numel() * quant[1].element_size()
    out = {"dense": ([dense.to(device) for _ in range(copies_of(dense_bytes))], dense_bytes),
           "int4": ([tuple(t.to(device) for t in quant) for _ in range(copies_of(int4_bytes))],
                    int4_bytes)}
    if not smoke and not tinygemm.unsupported_reason(k, n, group, 4, False, dtype):
        peer = [tinygemm.repack(*q, group) for q in out["int4"][0]]
        out["tinygemm"] = (peer, int4_bytes)
    return out


def reference(kind: str, x, weight, smoke: bool):
    from kubellm.kernels.w4a16_gemm import w4a16_gemm_ref
    if kind == "dense":
        return (x.float() @ weight.float().T)
    return w4a16_gemm_ref(x, *weight, SMOKE_GROUP if smoke else GROUP).float()


def run(smoke: bool, out_dir: Path | None, only: str = "") -> dict:
    import torch

    from benchmarks.gpu import workload_w as W
    device = "cpu" if smoke else "cuda"
    dtype = torch.bfloat16
    if smoke:
        W.DEVICE, W.DTYPE = "cpu", torch.float32
    copy_tb_s = W.measure_ceilings()["copy_tb_s"]
    calls = {name: c for name, c in kernels(smoke).items()
             if not only or name in only.split(",")}
    copies_of = (lambda b: 1) if smoke else (lambda b: max(2, -(-COLD_BYTES // b)))
    rows = []
    for k, n in (SMOKE_SHAPES if smoke else SHAPES):
        weights = make_weights(k, n, device, dtype, copies_of, smoke)
        for m in ((1, 4) if smoke else ROWS):
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(device, dtype)
            row = {"k": k, "n": n, "m": m, "kernels": {}}
            for name, (kind, call) in calls.items():
                if kind not in weights:
                    continue
                copies, nbytes = weights[kind]
                ref_kind = "int4" if kind == "tinygemm" else kind
                ref = reference(ref_kind, x, weights[ref_kind][0][0], smoke)
                diff = (call(x, copies[0]).float() - ref).abs().max().item()
                us = call_us([lambda w=w: call(x, w) for w in copies], device)
                read = nbytes / (us * 1e-6) / 1e12
                row["kernels"][name] = {"us": significant(us), "max_abs_diff": significant(diff),
                                        "of_copy_bandwidth": significant(read / copy_tb_s)}
            rows.append(row)
            print("gemv", json.dumps(row), flush=True)
            del x
        del weights
        if device == "cuda":
            torch.cuda.empty_cache()
    result = {"copy_tb_s": copy_tb_s, "group_size": SMOKE_GROUP if smoke else GROUP,
              "timing": "cuda-graph replays" if device == "cuda" else "wall clock",
              "rows": rows}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "gemv.json").write_text(json.dumps(result, indent=1))
    return result


def profile_only(only: str = "", shape: tuple[int, int] = (4096, 28672), rows: int = 1,
                 variants: str = ""):
    """Each kernel once at ``shape`` (K, N) and ``rows``, after its autotuning, inside NVTX
    'profile'; ``variants``: w4a16_gemm variants to profile as well (e.g. gemv-tc, by
    that name), whatever the rows."""
    import torch

    from kubellm.kernels.w4a16_gemm import w4a16_gemm
    calls = {name: c for name, c in kernels(False).items()
             if not only or name in only.split(",")}
    for variant in filter(None, variants.split(",")):
        calls[variant] = ("int4", lambda x, q, v=variant: w4a16_gemm(x, *q, GROUP, 4,
                                                                      variant=v))
    k, n = shape
    weights = make_weights(k, n, "cuda", torch.bfloat16, lambda b: 1, False)
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    for kind, call in calls.values():   # autotune outside the range
        if kind in weights:
            call(x, weights[kind][0][0])
    torch.cuda.synchronize()
    for name, (kind, call) in calls.items():
        if kind in weights:
            torch.cuda.nvtx.range_push("profile")
            call(x, weights[kind][0][0])
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            print("profiled", name, f"{k}x{n}", "rows", rows, flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--profile-only", action="store_true")
    parser.add_argument("--kernels", default="", help="comma-separated names (default all)")
    parser.add_argument("--shape", default="4096x28672", help="--profile-only: KxN")
    parser.add_argument("--rows", type=int, default=1, help="--profile-only: rows of x")
    parser.add_argument("--variants", default="",
                        help="--profile-only: w4a16_gemm variants to profile too")
    args = parser.parse_args()
    if args.smoke:   # CPU tensors run the Triton kernels in its interpreter
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if args.profile_only:
        k, n = (int(v) for v in args.shape.split("x"))
        profile_only(args.kernels, (k, n), args.rows, args.variants)
    else:
        run(args.smoke, args.out, args.kernels)


if __name__ == "__main__":
    main()
