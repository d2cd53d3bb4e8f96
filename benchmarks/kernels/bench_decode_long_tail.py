"""Paged decode attention over long-tailed batches: the unsplit kernel against the long
split (``paged_attention(..., num_kv_splits=S, min_kv_chunk=C)``) for several (S, C), each
told the batch is decode-only (``decode_only``: no search for a program's sequence), and
the unsplit kernel searching as a mixed batch's does.

The batches are the decode steps of the chat workload (benchmarks/gpu/varlen.py, seed 0)
as the engine runs it with every request admitted at once: at decode step t the
sequences whose output is longer than t, each holding its prompt plus t keys. Beside
them a workload-W-like step (256 sequences, prompts of 128-1024 plus 128 generated), and
batches of equal long contexts (64 and 256 x 4,096, 64 x 16,384), where every sequence
is cut.
Llama-3-8B heads (32 query, 8 KV, dim 128), block size 16, bf16, pages in random order.
Times are medians of CUDA-graph replays (triton.testing.do_bench flushes L2); bytes are
every K and V element of every sequence once, against the copy bandwidth of this run.

With ``--tiles`` it times instead every tile config (BLOCK_N, num_warps, num_stages) of
the kernel's TILE_CONFIGS on the same batches, unsplit and with the long split at
``--tile-splits``, and split-KV's batches of few sequences (1, 4, 16 x 512 and 4,096
keys), and prints each config's geometric-mean time against the best per batch: what
DECODE_CONFIG, the decode calls' fixed config, is chosen from.

    python -m benchmarks.kernels.bench_decode_long_tail --out DIR
    python -m benchmarks.kernels.bench_decode_long_tail --tiles --out DIR
    python -m benchmarks.kernels.bench_decode_long_tail --few --out DIR

With ``--few`` it times split-KV's batches of few sequences (1-16 sequences, 128-4,096
keys; the batch-1 decode of issue 20's ITL target among them) at the split count the
kernel chooses, with the fewest keys per split (min_kv_chunk) 0 (as the kernel runs
them: the keys cut evenly over every split, so a 512-key sequence at 32 splits is 8
one-tile programs and an 8-part merge), 128, 256 and 512, against the unsplit kernel.
    python -m benchmarks.kernels.bench_decode_long_tail --smoke [--tiles] --out DIR  # CPU
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

import torch

if "--smoke" in sys.argv and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first triton import

from benchmarks.gpu.varlen import lengths  # noqa: E402
from benchmarks.kernels.bench_paged_attention import (  # noqa: E402
    copy_bandwidth, graphed_median_ms, time_over_best,
)
from kubellm.kernels.paged_attention import (  # noqa: E402
    TILE_CONFIGS, choose_num_kv_splits, paged_attention,
)

CHAT_STEPS = (0, 120, 300, 480, 720)
UNIFORM = ((64, 4096), (256, 4096), (64, 16384))
# call 54 (s17): chunks of 256 lost to 512 and 512 to 1024 on every batch
CONFIGS = ((1, 0), (4, 512), (4, 1024), (8, 512), (8, 1024), (8, 2048), (16, 1024))
SMOKE_CONFIGS = ((1, 0), (4, 8))
FEW_SEQUENCES = ((1, 512), (4, 512), (16, 512), (1, 4096), (4, 4096), (16, 4096))
# --few: split-KV's batches, the shortest contexts first (where every split holds a tile)
FEW_CHUNKS = ((1, 128), (1, 512), (1, 1024), (1, 2048), (4, 512), (16, 512), (1, 4096),
              (4, 4096), (16, 4096))
MIN_CHUNKS = (0, 128, 256, 512)


def chat_step(t: int, smoke: bool) -> list[int]:
    """Context lengths of the chat workload's decode step ``t`` (seed 0)."""
    prompts, outputs = lengths("chat", 0, smoke)
    return [p + t for p, o in zip(prompts, outputs) if o > t]


def w_like_step(smoke: bool) -> list[int]:
    rng = random.Random(0)
    n, low, high, generated = (8, 8, 40, 6) if smoke else (256, 128, 1024, 128)
    return [rng.randint(low, high) + generated for _ in range(n)]


def make_case(seq_lens, heads, kv_heads, head_dim, block_size, dtype, device, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    blocks = [-(-n // block_size) for n in seq_lens]
    total = sum(blocks)
    shape = (total, block_size, kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    v_cache = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    perm = torch.randperm(total, generator=gen, device=device).to(torch.int32)
    table = torch.zeros(len(seq_lens), max(blocks), dtype=torch.int32, device=device)
    start = 0
    for row, n in enumerate(blocks):
        table[row, :n] = perm[start:start + n]
        start += n
    batch = len(seq_lens)
    return dict(q=torch.randn(batch, heads, head_dim, generator=gen, device=device,
                              dtype=dtype),
                k_cache=k_cache, v_cache=v_cache, block_tables=table,
                seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
                cu_seqlens_q=torch.arange(batch + 1, dtype=torch.int32, device=device),
                max_seqlen_q=1, scale=head_dim ** -0.5)


def bench(name, seq_lens, configs, args, device, copy_bw) -> dict:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    inputs = make_case(seq_lens, args.heads, args.kv_heads, args.head_dim, args.block_size,
                       dtype, device)
    kv_bytes = 2 * sum(seq_lens) * args.kv_heads * args.head_dim * dtype.itemsize
    row = {"case": name, "batch": len(seq_lens), "sum_context": sum(seq_lens),
           "max_context": max(seq_lens), "kv_bytes": kv_bytes, "configs": []}
    baseline = None
    # the first: the unsplit kernel as it was (each program searches cu_seqlens_q for its
    # sequence); then every config told the batch is decode-only (program = sequence)
    for splits, chunk, decode_only in [(*configs[0], False)] + [(*c, True) for c in configs]:
        out = torch.empty_like(inputs["q"])
        ms = graphed_median_ms(lambda: paged_attention(**inputs, out=out, num_kv_splits=splits,
                                                       min_kv_chunk=chunk,
                                                       decode_only=decode_only), device)
        if baseline is None:
            baseline = (ms, out.clone())
        row["configs"].append({
            "splits": splits, "min_chunk": chunk, "decode_only": decode_only,
            "us": round(ms * 1e3, 2),
            "fraction_of_copy_bw": round(kv_bytes / (ms * 1e-3) / copy_bw, 3),
            "speedup_vs_unsplit": round(baseline[0] / ms, 3),
            "max_abs_diff_vs_unsplit": float((out.float() - baseline[1].float()).abs().max())})
    best = max(row["configs"], key=lambda c: c["speedup_vs_unsplit"])
    print(f"{name}: batch {row['batch']}, context sum {row['sum_context']} max "
          f"{row['max_context']}: unsplit {row['configs'][0]['us']} us "
          f"({row['configs'][0]['fraction_of_copy_bw']} of copy BW); best S={best['splits']} "
          f"C={best['min_chunk']} {best['us']} us ({best['speedup_vs_unsplit']}x)", flush=True)
    for c in row["configs"]:
        print("   ", c, flush=True)
    return row


def sweep_tiles(name, seq_lens, split_modes, tiles, args, device) -> dict:
    """us per (tile config, split mode) on one batch; a mode (S, C) of None lets the
    kernel choose (split-KV for few sequences)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    inputs = make_case(seq_lens, args.heads, args.kv_heads, args.head_dim, args.block_size,
                       dtype, device)
    reference = torch.empty_like(inputs["q"])
    paged_attention(**inputs, out=reference, num_kv_splits=1, decode_only=True,
                    config=tiles[0])
    row = {"case": name, "batch": len(seq_lens), "max_context": max(seq_lens), "us": {}}
    for tile in tiles:
        for mode in split_modes:
            splits, chunk = mode if mode is not None else (None, None)
            out = torch.empty_like(inputs["q"])
            ms = graphed_median_ms(lambda: paged_attention(
                **inputs, out=out, num_kv_splits=splits, min_kv_chunk=chunk,
                decode_only=True, config=tile), device)
            diff = float((out.float() - reference.float()).abs().max())
            if diff > 0.05:
                raise RuntimeError(f"{name} tile {tile} mode {mode}: differs by {diff}")
            row["us"][f"{tile}|{mode}"] = round(ms * 1e3, 2)
    print(name, json.dumps(row["us"]), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--tiles", action="store_true",
                    help="time every tile config (see the module's docstring)")
    ap.add_argument("--few", action="store_true",
                    help="split-KV's few-sequence batches at several min_kv_chunk values")
    ap.add_argument("--tile-splits", default="4,1024;8,1024",
                    help="the long split's (S,C) pairs beside the unsplit kernel (--tiles)")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    configs = CONFIGS
    if args.smoke:
        args.heads, args.kv_heads, args.head_dim, args.block_size = 4, 2, 16, 4
        configs = SMOKE_CONFIGS
    copy_bw = copy_bandwidth(1 << (30 if device.type == "cuda" else 20), device)
    cases = [(f"chat_step_{t}", chat_step(t, args.smoke))
             for t in (CHAT_STEPS if not args.smoke else (0,))]
    cases.append(("w_like", w_like_step(args.smoke)))
    # equal long contexts (bench_paged_attention's decode cases): every sequence is cut
    for batch, context in UNIFORM if not args.smoke else ((4, 24),):
        cases.append((f"uniform_{batch}x{context}", [context] * batch))
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.few:
        rows = []
        for batch, context in FEW_CHUNKS if not args.smoke else ((1, 24), (2, 40)):
            # the split count the kernel chooses here (a power of two; 8 on the CPU,
            # where the kernel itself never splits)
            splits = choose_num_kv_splits(batch, args.kv_heads, 1, device) \
                if device.type == "cuda" else 8
            chunks = MIN_CHUNKS if not args.smoke else (0, 8, 16)
            rows.append(bench(f"few_{batch}x{context}", [context] * batch,
                              [(1, 0)] + [(splits, c) for c in chunks], args, device, copy_bw))
        result = {"device": device_name, "copy_bytes_per_s": copy_bw, "cases": rows}
        (out / "bench_decode_few.json").write_text(json.dumps(result, indent=1))
        return 0
    if args.tiles:
        long_modes = [tuple(int(v) for v in pair.split(","))
                      for pair in args.tile_splits.split(";") if pair]
        if args.smoke:
            long_modes = [(4, 8)]
        tiles = TILE_CONFIGS[:2] if args.smoke else TILE_CONFIGS
        rows = [sweep_tiles(name, lens, [(1, 0)] + long_modes, tiles, args, device)
                for name, lens in cases if lens]
        for batch, context in FEW_SEQUENCES if not args.smoke else ((1, 24),):
            rows.append(sweep_tiles(f"few_{batch}x{context}", [context] * batch, [None],
                                    tiles, args, device))
        result = {"device": device_name, "rows": rows,
                  "long_batches": time_over_best([r for r in rows
                                                if not r["case"].startswith("few_")]),
                  "few_sequences": time_over_best([r for r in rows
                                                 if r["case"].startswith("few_")])}
        print("geometric mean of time / best, long batches:", json.dumps(result["long_batches"]))
        print("few sequences (split-KV):", json.dumps(result["few_sequences"]))
        (out / "decode_tiles.json").write_text(json.dumps(result, indent=1))
        return 0
    result = {"device": device_name, "copy_bytes_per_s": copy_bw,
              "cases": [bench(name, lens, configs, args, device, copy_bw)
                        for name, lens in cases if lens]}
    (out / "bench_decode_long_tail.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
