"""Paged decode attention: KV-read bandwidth against device copy bandwidth, and time
against torch's scaled_dot_product_attention on the same K/V laid out contiguously.

    python -m benchmarks.kernels.bench_paged_attention --out DIR      # on the GPU
    python -m benchmarks.kernels.bench_paged_attention --smoke        # CPU, tiny, interpreted

Decode workload (BENCHMARKS.md): one decode token per sequence, batch 64 and 256, context 1k/4k/16k,
32 query heads, 8 KV heads, head dim 128, block size 16, bf16; pages in random order.
Bytes counted: every K and V element of every sequence's context read once (the query,
output and block table are < 1% of it). Copy bandwidth: a large device-to-device copy,
bytes read + written. Also causal prefills (--prefills) against SDPA is_causal, in
TFLOP/s. Times are medians of triton.testing.do_bench (which flushes L2
before each call) over replays of a CUDA graph holding one call, as the engine runs
decode; `ours_eager_us` adds our Python launch overhead (no graph). Writes bench_paged_attention.json into --out.

    python -m benchmarks.kernels.bench_paged_attention --prefill-tiles --out DIR

times instead every tile config of the kernel's TILE_CONFIGS on the causal prefill cases
(--prefills, and chunks of 128-512 tokens as mixed steps carry), after recording which
config the autotuner picks when its first prefill-shaped call has no query tokens, as the
engine's mixed-step CUDA graphs warm up (prefill_tiles.json).
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

if "--smoke" in sys.argv and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first triton import

import triton  # noqa: E402
import triton.testing  # noqa: E402
import kubellm.kernels.paged_attention as pa  # noqa: E402
from kubellm.kernels.paged_attention import choose_num_kv_splits, paged_attention  # noqa: E402


def median_ms(fn, device) -> float:
    """Median milliseconds of one call. On CUDA, do_bench times each call between events
    after flushing L2."""
    if device.type == "cuda":
        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def graphed_median_ms(fn, device) -> float:
    """Like median_ms, but on CUDA replays `fn` captured in a CUDA graph, as the engine
    runs decode steps: GPU time alone, without Python launch overhead."""
    if device.type != "cuda":
        return median_ms(fn, device)
    fn()  # autotune and compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return median_ms(graph.replay, device)


def copy_bandwidth(num_bytes: int, device) -> float:
    """Bytes/s of a device-to-device copy, counting bytes read and written."""
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), device)
    del src, dst
    return 2 * num_bytes / (ms * 1e-3)


def make_decode_case(batch, context, num_heads, num_kv_heads, head_dim, block_size, dtype, device):
    """Paged cache with each sequence's pages in random pool order, plus the same K/V
    contiguous as [B, Hkv, S, D] for SDPA."""
    gen = torch.Generator(device=device).manual_seed(0)
    blocks_per_seq = triton.cdiv(context, block_size)
    num_blocks = batch * blocks_per_seq
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen,
                          device=device, dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    perm = torch.randperm(num_blocks, generator=gen, device=device)
    block_tables = perm.view(batch, blocks_per_seq).to(torch.int32)
    q = torch.randn(batch, num_heads, head_dim, generator=gen, device=device, dtype=dtype)

    def contiguous(cache):
        pages = cache[block_tables.long()]  # [B, blocks, block_size, Hkv, D]
        return pages.flatten(1, 2)[:, :context].transpose(1, 2).contiguous()

    return dict(
        q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables,
        seq_lens=torch.full((batch,), context, dtype=torch.int32, device=device),
        cu_seqlens_q=torch.arange(batch + 1, dtype=torch.int32, device=device),
        max_seqlen_q=1, scale=head_dim ** -0.5,
    ), contiguous(k_cache), contiguous(v_cache)


def sdpa_decode(q, k, v, scale):
    """q [B, Hq, D], k/v [B, Hkv, S, D] -> [B, Hq, D], GQA without copying K/V."""
    out = torch.nn.functional.scaled_dot_product_attention(
        q.unsqueeze(2), k, v, scale=scale, enable_gqa=True)
    return out.squeeze(2)


def bench_case(batch, context, args, device, copy_bw):
    dtype = torch.bfloat16
    inputs, k_contig, v_contig = make_decode_case(
        batch, context, args.num_heads, args.num_kv_heads, args.head_dim, args.block_size,
        dtype, device)
    out = torch.empty_like(inputs["q"])
    ours = lambda: paged_attention(**inputs, out=out)  # noqa: E731
    sdpa = lambda: sdpa_decode(inputs["q"], k_contig, v_contig, inputs["scale"])  # noqa: E731
    ours_eager_ms = median_ms(ours, device)
    ours_ms = graphed_median_ms(ours, device)
    max_diff = (out.float() - sdpa().float()).abs().max().item()
    sdpa_ms = graphed_median_ms(sdpa, device)
    kv_bytes = 2 * batch * context * args.num_kv_heads * args.head_dim * dtype.itemsize
    bandwidth = kv_bytes / (ours_ms * 1e-3)
    return dict(
        batch=batch, context=context,
        num_kv_splits=choose_num_kv_splits(batch, args.num_kv_heads, 1, device),
        ours_us=ours_ms * 1e3, ours_eager_us=ours_eager_ms * 1e3, sdpa_us=sdpa_ms * 1e3, speedup_vs_sdpa=sdpa_ms / ours_ms,
        kv_bytes=kv_bytes, kv_read_bytes_per_s=bandwidth,
        sdpa_kv_read_bytes_per_s=kv_bytes / (sdpa_ms * 1e-3),
        fraction_of_copy_bw=bandwidth / copy_bw, max_abs_diff_vs_sdpa=max_diff,
    )


def bench_prefill_case(batch, length, args, device):
    """Causal prefill of `batch` fresh sequences of `length` tokens (all in one varlen
    batch) against SDPA is_causal on the same K/V contiguous: TFLOP/s of QK^T and PV."""
    inputs, k_contig, v_contig = prefill_inputs(batch, length, args, device)
    q = inputs["q"]
    q_sdpa = q.view(batch, length, args.num_heads, args.head_dim).transpose(1, 2)
    out = torch.empty_like(q)
    ours_ms = graphed_median_ms(lambda: paged_attention(**inputs, out=out), device)
    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
        q_sdpa, k_contig, v_contig, is_causal=True, scale=inputs["scale"], enable_gqa=True)
    max_diff = (out.view(batch, length, args.num_heads, -1).transpose(1, 2).float()
                - sdpa().float()).abs().max().item()
    sdpa_ms = graphed_median_ms(sdpa, device)
    flops = 4 * batch * args.num_heads * args.head_dim * length * (length + 1) / 2
    return dict(batch=batch, length=length, ours_us=ours_ms * 1e3, sdpa_us=sdpa_ms * 1e3,
                ours_tflops=flops / (ours_ms * 1e9), sdpa_tflops=flops / (sdpa_ms * 1e9),
                speedup_vs_sdpa=sdpa_ms / ours_ms, max_abs_diff_vs_sdpa=max_diff)


def prefill_inputs(batch, length, args, device):
    """(paged_attention's arguments for ``batch`` fresh causal prefills of ``length``
    tokens, K and V laid out contiguously for SDPA)."""
    inputs, k_contig, v_contig = make_decode_case(
        batch, length, args.num_heads, args.num_kv_heads, args.head_dim, args.block_size,
        torch.bfloat16, device)
    gen = torch.Generator(device=device).manual_seed(1)
    inputs.update(q=torch.randn(batch * length, args.num_heads, args.head_dim, generator=gen,
                                device=device, dtype=torch.bfloat16),
                  max_seqlen_q=length, cu_seqlens_q=torch.arange(
                      0, batch * length + 1, length, dtype=torch.int32, device=device))
    return inputs, k_contig, v_contig


def time_over_best(rows: list[dict]) -> dict:
    """Per key of the rows' ``us``: the geometric mean over rows of its time against the
    row's best, fastest first."""
    ratios: dict[str, list[float]] = {}
    for row in rows:
        best = min(row["us"].values())
        for key, us in row["us"].items():
            ratios.setdefault(key, []).append(us / best)
    means = {key: statistics.geometric_mean(v) for key, v in ratios.items()}
    return {key: round(mean, 4) for key, mean in sorted(means.items(), key=lambda kv: kv[1])}


def warmup_choice(args, device) -> dict:
    """The configs the autotuner keeps when its first prefill-shaped calls (64- and
    128-row tiles) have no query tokens: the mixed-step graphs' warm-up metadata."""
    chosen = {}
    fixed, pa.PREFILL_CONFIG = pa.PREFILL_CONFIG, None   # the launcher's tuner, as before
    try:
        for max_query in (16, 2047):
            inputs, _, _ = prefill_inputs(4, 64, args, device)
            inputs.update(max_seqlen_q=max_query, cu_seqlens_q=torch.zeros_like(
                inputs["cu_seqlens_q"][:5]), block_tables=inputs["block_tables"][:4],
                seq_lens=torch.ones_like(inputs["seq_lens"][:4]))
            paged_attention(**inputs)
            torch.cuda.synchronize()
            chosen[max_query] = {str(k): str(v)
                                 for k, v in pa._paged_attention_kernel_tuned.cache.items()}
    finally:
        pa.PREFILL_CONFIG = fixed
    return chosen


def prefill_tiles(args, device) -> dict:
    cases = [tuple(int(x) for x in c.split("x")) for c in args.prefills.split(",") if c]
    if not args.smoke:
        cases += [(16, 128), (4, 512)]
    tiles = pa.TILE_CONFIGS[:2] if args.smoke else pa.TILE_CONFIGS
    result = {"warmup_choice": warmup_choice(args, device) if device.type == "cuda" else {},
              "rows": []}
    print("autotuner after zero-query warm-ups:", json.dumps(result["warmup_choice"]), flush=True)
    for batch, length in cases:
        inputs, _, _ = prefill_inputs(batch, length, args, device)
        out = torch.empty_like(inputs["q"])
        row = {"batch": batch, "length": length, "us": {}}
        for tile in tiles:
            ms = graphed_median_ms(lambda: paged_attention(**inputs, out=out, config=tile),
                                   device)
            row["us"][str(tile)] = round(ms * 1e3, 2)
        print(batch, "x", length, json.dumps(row["us"]), flush=True)
        result["rows"].append(row)
    result["mean_time_over_best"] = time_over_best(result["rows"])
    print("geometric mean of time / best:", json.dumps(result["mean_time_over_best"]))
    return result


def print_prefill_table(results):
    print("causal prefill (no cached prefix):")
    print("| batch | length | ours us | sdpa us | vs sdpa | ours TFLOP/s | sdpa TFLOP/s | max|diff| |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['batch']} | {r['length']} | {r['ours_us']:.1f} | {r['sdpa_us']:.1f} | "
              f"{r['speedup_vs_sdpa']:.2f}x | {r['ours_tflops']:.0f} | {r['sdpa_tflops']:.0f} | "
              f"{r['max_abs_diff_vs_sdpa']:.1e} |")


def print_table(results, copy_bw):
    print(f"copy bandwidth (read+write): {copy_bw / 1e12:.2f} TB/s")
    header = ("batch", "context", "splits", "ours us", "eager us", "sdpa us", "vs sdpa", "KV TB/s",
              "of copy", "max|diff|")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in results:
        print(f"| {r['batch']} | {r['context']} | {r['num_kv_splits']} | {r['ours_us']:.1f} | "
              f"{r['ours_eager_us']:.1f} | {r['sdpa_us']:.1f} | {r['speedup_vs_sdpa']:.2f}x | "
              f"{r['kv_read_bytes_per_s'] / 1e12:.2f} | {100 * r['fraction_of_copy_bw']:.0f}% | "
              f"{r['max_abs_diff_vs_sdpa']:.1e} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="folder for bench_paged_attention.json")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; runs on CPU")
    parser.add_argument("--batches", default="64,256")
    parser.add_argument("--contexts", default="1024,4096,16384")
    parser.add_argument("--prefills", default="8x1024,2x4096,1x16384",
                        help="BATCHxLENGTH causal prefill cases ('' for none)")
    parser.add_argument("--num-heads", type=int, default=32)
    parser.add_argument("--num-kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--prefill-tiles", action="store_true",
                        help="time every tile config on the prefill cases (docstring)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.smoke:
        args.batches, args.contexts, args.prefills = "2,3", "40,100", "2x24"
        args.num_heads, args.num_kv_heads, args.head_dim, args.block_size = 4, 2, 16, 16
    elif device.type != "cuda":
        parser.error("no CUDA device: use --smoke for the CPU check")

    if args.prefill_tiles:
        result = prefill_tiles(args, device)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "prefill_tiles.json"), "w") as f:
                json.dump(result, f, indent=2)
        return
    copy_bw = copy_bandwidth((1 << 20) if args.smoke else (4 << 30), device)
    results = []
    for batch in (int(b) for b in args.batches.split(",")):
        for context in (int(c) for c in args.contexts.split(",")):
            results.append(bench_case(batch, context, args, device, copy_bw))
            if device.type == "cuda":
                torch.cuda.empty_cache()
    prefill_results = []
    for case in filter(None, args.prefills.split(",")):
        batch, length = (int(x) for x in case.split("x"))
        prefill_results.append(bench_prefill_case(batch, length, args, device))
    print_table(results, copy_bw)
    if prefill_results:
        print_prefill_table(prefill_results)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        report = dict(
            command=" ".join(["python"] + sys.argv), smoke=args.smoke,
            device=torch.cuda.get_device_name() if device.type == "cuda" else platform.processor(),
            torch=torch.__version__, triton=triton.__version__,
            shape=dict(num_heads=args.num_heads, num_kv_heads=args.num_kv_heads,
                       head_dim=args.head_dim, block_size=args.block_size, dtype="bfloat16"),
            copy_bytes_per_s=copy_bw, results=results, prefill_results=prefill_results,
        )
        path = os.path.join(args.out, "bench_paged_attention.json")
        with open(path, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
