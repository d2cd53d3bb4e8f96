"""Where a decode step's time goes, and what each kernel switch changes, in one run.

Llama-3-8B shape (random weights), a decode step at batch 256 / context 512 and at batch
1: device time per step (a CUDA graph of the model, the LM head and the greedy argmax,
as the engine runs a step; CUDA events around its replays) with the defaults, with each
decode switch of kernel_switches.py alone, with all of them, and with the defaults again
(the spread between the two default runs is the noise). Then the torch profiler's
kernels, grouped into parts (GEMMs, attention, norms, rotary, KV write, ...) beside each
part's floor from the ceilings measured in the run, and the decode GEMMs alone against
their roofline (at 256 rows they are compute-bound: not a weight read).

    python -m benchmarks.gpu.decode_ablation --out DIR
    python -m benchmarks.gpu.decode_ablation --smoke --out DIR   # tiny, CPU, interpreted

Writes decode_ablation.json, decode_ablation_profile.txt and kernel_switches_decode.txt:
the switches that won (faster at the largest batch by more than the noise, not slower at
batch 1, the same hidden states), which run_all.sh hands to its later stages.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

if "--smoke" in sys.argv and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before the first triton import

from benchmarks.common import kernel_profile  # noqa: E402
from benchmarks.common.ceilings import gemm_floor_ms, measure_ceilings  # noqa: E402
from benchmarks.common.limits import model_sizes  # noqa: E402
from benchmarks.common.shapes import LLAMA3_8B, write_config  # noqa: E402

SMOKE_SHAPE = dict(vocab_size=2048, hidden_size=64, intermediate_size=128,
                   num_attention_heads=4, num_key_value_heads=2)


def device_ms(fn, device: str, replays: int) -> float:
    """Median device ms of ``fn``: on CUDA a graph of one call, each replay between two
    events; on a CPU the wall time of eager calls."""
    fn()                                      # autotune / compile outside the timing
    if device != "cuda":
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    torch.cuda.empty_cache()
    return statistics.median(times)


def blocks_needed(batch: int, context: int, block_size: int) -> int:
    return batch * -(-(context + 1) // block_size)


def decode_inputs(batch: int, context: int, block_size: int, vocab: int, device,
                  first_block: int):
    """A decode step of ``batch`` sequences of ``context`` cached tokens, their pages in
    random order in blocks ``first_block``.. (each batch its own: a step writes its
    tokens' keys, which must not land in another batch's context)."""
    from kubellm.runtime.attention.metadata import AttentionMetadata
    gen = torch.Generator().manual_seed(batch)
    blocks_per_seq = -(-(context + 1) // block_size)
    table = first_block + torch.randperm(batch * blocks_per_seq, generator=gen).view(
        batch, blocks_per_seq)
    slots = table[:, context // block_size] * block_size + context % block_size
    meta = AttentionMetadata(
        slot_mapping=slots.to(device), block_tables=table.int().to(device),
        seq_lens=torch.full((batch,), context + 1, dtype=torch.int32, device=device),
        cu_seqlens_q=torch.arange(batch + 1, dtype=torch.int32, device=device),
        max_seqlen_q=1, seq_lens_cpu=[context + 1] * batch, query_lens_cpu=[1] * batch,
        is_decode_only=True, num_decodes=batch)
    tokens = torch.randint(16, vocab - 16, (batch,), generator=gen).to(device)
    positions = torch.full((batch,), context, dtype=torch.int64, device=device)
    return tokens, positions, meta, torch.arange(batch, device=device)


def step_functions(model, inputs) -> dict:
    """The step as the engine runs it, and its pieces: forward only, + LM head."""
    from kubellm.runtime.attention.metadata import set_metadata
    tokens, positions, meta, rows = inputs

    def forward():
        set_metadata(meta)
        try:
            return model(tokens, positions)[0]
        finally:
            set_metadata(None)
    return {"forward": forward,
            "forward_lm_head": lambda: model.compute_logits(forward()[rows]),
            "step": lambda: model.compute_logits(forward()[rows]).float().argmax(-1)}


def floors(shape: dict, batch: int, context: int, ceilings: dict, itemsize: int) -> dict:
    """Each part's floor at this batch and context (ms): the GEMMs by their roofline,
    the attention by its KV read, and the memory-only floor the issue quotes."""
    s = model_sizes(shape, itemsize)
    h, ffn = shape["hidden_size"], shape["intermediate_size"]
    kv = s["kv_bytes_per_token"] // s["layers"] // 2 // itemsize
    gemms = {"qkv": (s["q_dim"] + 2 * kv, h), "o": (h, s["q_dim"]),
             "gate_up": (2 * ffn, h), "down": (h, ffn)}
    gemm = s["layers"] * sum(gemm_floor_ms(batch, n, k, ceilings, itemsize)
                             for n, k in gemms.values())
    gemm += gemm_floor_ms(batch, shape["vocab_size"], h, ceilings, itemsize)
    copy = ceilings["copy_tb_s"] * 1e12
    attention = batch * (context + 1) * s["kv_bytes_per_token"] / copy * 1e3
    weights = itemsize * (s["layers"] * s["layer_params"] + s["head_params"]) / copy * 1e3
    return {"gemm_ms": round(gemm, 4), "attention_ms": round(attention, 4),
            "step_floor_ms": round(gemm + attention, 4),
            "memory_floor_ms": round(weights + attention, 4), "gemm_shapes": gemms}


def gemm_alone(shape_gemms: dict, vocab: int, hidden: int, batches, ceilings, device, dtype,
               replays) -> list[dict]:
    rows = []
    for m in batches:
        for name, (n, k) in {**shape_gemms, "lm_head": (vocab, hidden)}.items():
            x = torch.randn(m, k, device=device, dtype=dtype)
            w = torch.randn(n, k, device=device, dtype=dtype)
            ms = device_ms(lambda: torch.nn.functional.linear(x, w), device, replays)
            floor = gemm_floor_ms(m, n, k, ceilings, dtype.itemsize)
            rows.append({"gemm": name, "m": m, "n": n, "k": k, "ms": round(ms, 4),
                         "floor_ms": round(floor, 4), "fraction_of_floor": round(floor / ms, 3),
                         "tflops": float(f"{2 * m * n * k / (ms * 1e9):.4g}")})
            del x, w
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--batches", default="1,256")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="tiny shape on the CPU")
    args = ap.parse_args()
    smoke = args.smoke
    device = "cpu" if smoke else "cuda"
    dtype = torch.float32 if smoke else torch.bfloat16
    batches = [int(b) for b in args.batches.split(",")]
    shape = {**LLAMA3_8B, "num_hidden_layers": args.layers, **(SMOKE_SHAPE if smoke else {})}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ceilings = measure_ceilings(device, dtype)
    print("ceilings:", ceilings, flush=True)

    from kubellm.runtime import LLM
    from kubellm.runtime.kernel_switches import KernelSwitches
    block_size, max_batch = 16, max(batches)
    model_dir = write_config(shape, Path(tempfile.mkdtemp()) / "model")
    llm = LLM(model_dir, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
              attention_backend="triton", device=device, dtype=str(dtype)[6:],
              max_num_seqs=max_batch, max_model_len=args.context + 64, block_size=block_size,
              num_kv_blocks=sum(blocks_needed(b, args.context, block_size) for b in batches))
    runner = llm.engine.executor
    for layer in runner.attn_layers:     # a context worth attending to
        layer.k_cache.normal_()
        layer.v_cache.normal_()
    switches = runner.switches
    # the 4-bit and FP8 switches act at load on quantized models (benchmarks/gpu/w4a16.py
    # measures them), mixed_graphs at startup on mixed steps (benchmarks/gpu/mixed_step.py):
    # flipped here they would time the defaults again
    decode_switches = [n for n in KernelSwitches.__dataclass_fields__
                       if not n.startswith(("prefill", "w4a16", "fp8", "mixed"))]
    variants = [("defaults", [])] + [(n, [n]) for n in decode_switches]
    if len(decode_switches) > 1:
        variants.append(("all", decode_switches))
    variants.append(("defaults_again", []))
    firsts = [sum(blocks_needed(b, args.context, block_size) for b in batches[:i])
              for i in range(len(batches))]
    inputs = {b: decode_inputs(b, args.context, block_size, shape["vocab_size"], device, f)
              for b, f in zip(batches, firsts)}
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "torch": torch.__version__, "shape": {k: shape[k] for k in (
                  "hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size")},
              "context": args.context, "ceilings": ceilings,
              "floors": {b: floors(shape, b, args.context, ceilings, dtype.itemsize)
                         for b in batches}, "variants": []}
    baseline_hidden = {}
    with torch.inference_mode():
        for name, enabled in variants:
            for field in KernelSwitches.__dataclass_fields__:
                setattr(switches, field, field in enabled)
            row = {"variant": name, "switches": switches.describe()}
            for b in batches:
                fns = step_functions(runner.model, inputs[b])
                row[f"batch{b}_ms"] = round(device_ms(fns["step"], device, args.replays), 4)
                hidden = fns["forward"]().float()
                reference = baseline_hidden.setdefault(b, hidden)
                row[f"batch{b}_max_rel_diff"] = float(
                    (hidden - reference).abs().max() / reference.abs().max())
                if name == "defaults":
                    row[f"batch{b}_pieces_ms"] = {
                        piece: round(device_ms(fns[piece], device, args.replays), 4)
                        for piece in ("forward", "forward_lm_head")}
            result["variants"].append(row)
            print(json.dumps(row), flush=True)
        result["winners"] = pick_winners(result["variants"], batches)
        profiles = []
        for name, enabled in (("defaults", []), ("all", decode_switches)):
            for field in KernelSwitches.__dataclass_fields__:
                setattr(switches, field, field in enabled)
            fns = step_functions(runner.model, inputs[max_batch])
            per_kernel, table = kernel_profile.profile_steps(fns["step"], args.profile_steps,
                                                             device)
            result[f"profile_{name}"] = {
                "batch": max_batch, "by_part_ms": kernel_profile.by_category(per_kernel),
                "top_kernels": kernel_profile.top_kernels(per_kernel)}
            profiles.append(f"== {name} ({switches.describe()}), batch {max_batch}, "
                            f"context {args.context}, {args.profile_steps} steps\n{table}\n")
    gemm_shapes = result["floors"][max_batch].pop("gemm_shapes")
    for b in batches:
        result["floors"][b].pop("gemm_shapes", None)
    result["gemms"] = gemm_alone(gemm_shapes, shape["vocab_size"], shape["hidden_size"],
                                 batches, ceilings, device, dtype, args.replays)
    (out / "decode_ablation.json").write_text(json.dumps(result, indent=1))
    (out / "decode_ablation_profile.txt").write_text("\n".join(profiles))
    (out / "kernel_switches_decode.txt").write_text(",".join(result["winners"]) + "\n")
    print("winners:", result["winners"] or "none")
    print(json.dumps({k: result[k] for k in ("floors", "winners")}))
    return 0


def pick_winners(rows: list[dict], batches: list[int]) -> list[str]:
    """Switches faster than the defaults at the largest batch by more than the two
    default runs differ (and 0.5%), not slower at the smallest by more than that, with
    hidden states within bf16 rounding of the defaults'."""
    by_name = {r["variant"]: r for r in rows}
    big, small = f"batch{max(batches)}_ms", f"batch{min(batches)}_ms"
    base, again = by_name["defaults"], by_name["defaults_again"]
    winners = []
    for name, row in by_name.items():
        if name in ("defaults", "defaults_again", "all"):
            continue
        noise = {k: max(abs(base[k] - again[k]), 0.005 * base[k]) for k in (big, small)}
        faster = row[big] < min(base[big], again[big]) - noise[big]
        not_slower = row[small] <= max(base[small], again[small]) + noise[small]
        same = all(row[f"batch{b}_max_rel_diff"] < 2e-2 for b in batches)
        if faster and not_slower and same:
            winners.append(name)
    return winners


if __name__ == "__main__":
    sys.exit(main())
