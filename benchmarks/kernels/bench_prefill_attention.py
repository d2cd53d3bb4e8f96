"""Causal prefill attention from 512 to 32k tokens: our kernels against SDPA's flash
backend on the same Q/K/V, in TFLOP/s, in one run.

Llama-3-8B heads (32 query, 8 KV, head dim 128), bf16, fresh prompts (no cached
prefix), batch x length = 16k tokens up to 16k (one 32k prompt). Variants: the paged
kernel the engine uses by default (every key gathered through the block table), the
prefill kernel (kernel_switches ``prefill_attention``: the step's keys read as rows of the
projection output) with plain loads and with tensor descriptors (``..._tma``), and
SDPA (flash backend, and whatever SDPA picks by default) on [B, H, S, D] with K/V
expanded to the query heads. Times: median of do_bench over replays of a CUDA graph
holding one call (L2 flushed before each). FLOPs counted: 4 * heads * D * S(S+1)/2 per
sequence (QK^T and PV over the causal half).

    python -m benchmarks.kernels.bench_prefill_attention --out DIR
    python -m benchmarks.kernels.bench_prefill_attention --smoke --out DIR   # CPU, tiny

Writes bench_prefill_attention.json and kernel_switches_prefill.txt (``prefill_attention``
and maybe ``prefill_attention_tma``, when that variant beats the paged kernel at every
length with outputs within bf16 tolerance of SDPA's) for run_all.sh's later stages.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

if "--smoke" in sys.argv and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before the first triton import

from benchmarks.kernels.bench_paged_attention import graphed_median_ms  # noqa: E402
from kubellm.kernels.paged_attention import paged_attention  # noqa: E402
from kubellm.kernels.prefill_attention import prefill_attention  # noqa: E402

VARIANTS = ("paged", "prefill", "prefill_tma")


def make_case(batch, length, num_heads, num_kv_heads, head_dim, block_size, dtype, device):
    """Q/K/V of ``batch`` fresh prompts as one varlen step ([T, H, D] slices of a fused
    projection output, as the engine has them), the same K/V in a paged cache whose
    pages are in random order, and [B, Hq, S, D] copies for SDPA."""
    gen = torch.Generator(device=device).manual_seed(length)
    tokens = batch * length
    qkv = torch.randn(tokens, num_heads + 2 * num_kv_heads, head_dim, generator=gen,
                      device=device, dtype=dtype)
    q, k, v = qkv.split([num_heads, num_kv_heads, num_kv_heads], dim=1)
    blocks_per_seq = -(-length // block_size)
    num_blocks = batch * blocks_per_seq
    table = torch.randperm(num_blocks, generator=gen, device=device).view(batch, -1)
    caches = []
    for new in (k, v):
        cache = torch.zeros(num_blocks, block_size, num_kv_heads, head_dim, device=device,
                            dtype=dtype)
        pos = torch.arange(length, device=device)
        for b in range(batch):
            cache[table[b, pos // block_size].long(), pos % block_size] = \
                new[b * length:(b + 1) * length]
        caches.append(cache)
    common = dict(q=q, k_cache=caches[0], v_cache=caches[1], block_tables=table.int(),
                  seq_lens=torch.full((batch,), length, dtype=torch.int32, device=device),
                  cu_seqlens_q=torch.arange(0, tokens + 1, length, dtype=torch.int32,
                                            device=device),
                  max_seqlen_q=length, scale=head_dim ** -0.5)
    group = num_heads // num_kv_heads

    def heads_first(t, expand=1):
        t = t.reshape(batch, length, -1, head_dim).transpose(1, 2)
        return t.repeat_interleave(expand, dim=1).contiguous()
    sdpa_inputs = (heads_first(q), heads_first(k, group), heads_first(v, group))
    return common, k, v, sdpa_inputs


def sdpa_call(q, k, v, scale, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if backend == "default":
        return lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scale)

    def call():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=scale)
    return call


def bench_length(batch, length, args, device, dtype) -> dict:
    common, k, v, (q4, k4, v4) = make_case(batch, length, args.num_heads, args.num_kv_heads,
                                           args.head_dim, 16, dtype, device)
    out = torch.empty_like(common["q"])
    calls = {"paged": lambda: paged_attention(**common, out=out),
             "prefill": lambda: prefill_attention(**common, k=k, v=v, out=out),
             "prefill_tma": lambda: prefill_attention(**common, k=k, v=v, out=out,
                                                      use_tma=True)}
    flops = 4 * batch * args.num_heads * args.head_dim * length * (length + 1) / 2
    sdpa_backends = ("flash", "default") if device.type == "cuda" else ("default",)
    row = {"batch": batch, "length": length, "flops": flops}
    reference = sdpa_call(q4, k4, v4, common["scale"], "default")().transpose(1, 2)
    reference = reference.reshape(out.shape).float()
    for name, call in calls.items():
        ms = graphed_median_ms(call, device)
        call()
        row[f"{name}_us"] = round(ms * 1e3, 2)
        row[f"{name}_tflops"] = float(f"{flops / (ms * 1e9):.4g}")   # never rounds to 0
        row[f"{name}_max_abs_diff"] = float((out.float() - reference).abs().max())
    for backend in sdpa_backends:
        try:
            ms = graphed_median_ms(sdpa_call(q4, k4, v4, common["scale"], backend), device)
        except RuntimeError as exc:   # no flash kernel for this input: say so, go on
            row[f"sdpa_{backend}_error"] = str(exc)[:200]
            continue
        row[f"sdpa_{backend}_us"] = round(ms * 1e3, 2)
        row[f"sdpa_{backend}_tflops"] = float(f"{flops / (ms * 1e9):.4g}")
    peer = row.get("sdpa_flash_us") or row["sdpa_default_us"]
    for name in VARIANTS:
        row[f"{name}_vs_sdpa"] = float(f"{peer / row[f'{name}_us']:.4g}")
    return row


def recommend(rows: list[dict], tolerance: float) -> list[str]:
    """The prefill kernel's switches when its best variant beats the paged kernel at
    every length, with outputs within ``tolerance`` of SDPA's."""
    def good(name):
        return all(r[f"{name}_us"] < r["paged_us"] and r[f"{name}_max_abs_diff"] < tolerance
                   for r in rows)
    best = min(("prefill", "prefill_tma"), key=lambda n: sum(r[f"{n}_us"] for r in rows))
    if not good(best):
        return []
    return ["prefill_attention"] + (["prefill_attention_tma"] if best == "prefill_tma" else [])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--lengths", default="512,1024,2048,4096,8192,16384,32768")
    ap.add_argument("--tokens", type=int, default=16384, help="batch x length up to this")
    ap.add_argument("--num-heads", type=int, default=32)
    ap.add_argument("--num-kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    args = ap.parse_args()
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    if args.smoke:
        args.num_heads, args.num_kv_heads, args.head_dim = 4, 2, 16
        args.lengths, args.tokens = "24,40", 48
    rows = []
    for length in (int(n) for n in args.lengths.split(",")):
        row = bench_length(max(1, args.tokens // length), length, args, device, dtype)
        rows.append(row)
        print(json.dumps(row), flush=True)
    switches = recommend(rows, 2e-5 if dtype == torch.float32 else 3e-2)
    print("| length | batch | paged | prefill | prefill tma | SDPA (flash) | TFLOP/s: paged / "
          "prefill / tma / SDPA |")
    for r in rows:
        print(f"| {r['length']} | {r['batch']} | {r['paged_vs_sdpa']:.2f}x | "
              f"{r['prefill_vs_sdpa']:.2f}x | {r['prefill_tma_vs_sdpa']:.2f}x | 1.00x | "
              f"{r['paged_tflops']:.0f} / {r['prefill_tflops']:.0f} / "
              f"{r['prefill_tma_tflops']:.0f} / "
              f"{r.get('sdpa_flash_tflops', r.get('sdpa_default_tflops', 0)):.0f} |")
    print("recommended switches:", switches or "none")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "heads": [args.num_heads, args.num_kv_heads],
              "head_dim": args.head_dim, "rows": rows, "recommended_switches": switches}
    (out / "bench_prefill_attention.json").write_text(json.dumps(result, indent=1))
    (out / "kernel_switches_prefill.txt").write_text(",".join(switches) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
