"""Does prefetching the next linear layer's weights into L2 bring a small decode step
closer to its weight-read floor? (issue 20: batch-1 ITL within 10% of the floor; issue
16: 4-bit at batch 1 >= 3.0x bf16; runtime/worker/weight_prefetch.py).

Llama-3-8B shape, random weights, bf16 and 4-bit (quantization="4bit", groups of 128),
decode steps at a few batch sizes and context 512, as decode_ablation.py times a step (a
CUDA graph of forward + LM head + argmax, CUDA events around each replay, median). For
each engine and batch: prefetch off, each prefetch variant (mode, when, MiB per layer),
off again (the spread of the two is the noise). Each step's floor is the bytes of weights
it reads (every linear layer's tensors and the LM head) at the copy bandwidth measured in
the same run, plus the KV read; prints ms, the floor's ratio and each variant's speedup,
and checks that each variant picks the same tokens as off.

    python -m benchmarks.gpu.l2_prefetch --out DIR       # DIR/l2_prefetch.json
    python -m benchmarks.gpu.l2_prefetch --smoke --out DIR   # tiny, CPU: plumbing only
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

if "--smoke" in sys.argv and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before the first triton import

from benchmarks.common.ceilings import measure_ceilings  # noqa: E402
from benchmarks.common.limits import model_sizes  # noqa: E402
from benchmarks.common.shapes import LLAMA3_8B, write_config  # noqa: E402
from benchmarks.gpu.decode_ablation import (SMOKE_SHAPE, blocks_needed,  # noqa: E402
                                            decode_inputs, device_ms, step_functions)

MIB = 2**20
# (mode, when, MiB per linear layer)
VARIANTS = [("line", "after", 8), ("line", "after", 16), ("line", "after", 32),
            ("line", "after", 64), ("line_last", "after", 32), ("bulk", "after", 32),
            ("line", "before", 32), ("line_last", "before", 16)]
ENGINES = {"bf16": {}, "4bit": {"quantization": "4bit", "quantization_group_size": 128}}


def read_bytes(model) -> int:
    """Bytes of weights a decode step reads: every linear layer's tensors and the head."""
    from kubellm.runtime.worker.weight_prefetch import linear_layers, weight_tensors
    total = sum(t.numel() * t.element_size()
                for layer in linear_layers(model) for t in weight_tensors(layer))
    head = model.lm_head if model.lm_head is not None else model.embed_tokens
    return total + sum(p.numel() * p.element_size() for p in head.parameters())


def run_engine(name: str, shape: dict, batches: list[int], context: int, ceilings: dict,
               replays: int, variants, device: str, dtype) -> dict:
    from kubellm.runtime import LLM
    from kubellm.runtime.worker.weight_prefetch import WeightPrefetcher
    block_size = 16
    model_dir = write_config(shape, Path(tempfile.mkdtemp()) / "model")
    extra = dict(ENGINES[name])
    if device == "cpu" and "quantization_group_size" in extra:
        extra["quantization_group_size"] = 64
    llm = LLM(model_dir, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
              attention_backend="triton", device=device, dtype=str(dtype)[6:],
              max_num_seqs=max(batches), max_model_len=context + 64, block_size=block_size,
              num_kv_blocks=sum(blocks_needed(b, context, block_size) for b in batches),
              **extra)
    runner = llm.engine.executor
    runner.switches.l2_prefetch = False          # the runner's own hooks stay idle
    for layer in runner.attn_layers:
        layer.k_cache.normal_()
        layer.v_cache.normal_()
    model = runner.model
    weights = read_bytes(model)
    kv_per_token = model_sizes(shape, dtype.itemsize)["kv_bytes_per_token"]
    copy = ceilings["copy_tb_s"] * 1e12
    firsts = [sum(blocks_needed(b, context, block_size) for b in batches[:i])
              for i in range(len(batches))]
    result = {"engine": name, "weight_read_bytes": weights, "batches": []}
    with torch.inference_mode():
        for b, first in zip(batches, firsts):
            fns = step_functions(model, decode_inputs(b, context, block_size,
                                                      shape["vocab_size"], device, first))
            floor = (weights + b * (context + 1) * kv_per_token) / copy * 1e3
            want = fns["step"]().clone()
            row = {"batch": b, "floor_ms": round(floor, 4), "variants": []}
            for label, variant in ([("off", None)] + [(f"{m}/{w}/{mb}MiB", (m, w, mb))
                                                      for m, w, mb in variants]
                                   + [("off_again", None)]):
                prefetcher = None
                if variant is not None:
                    mode, when, mib = variant
                    prefetcher = WeightPrefetcher(model, max_bytes=mib * MIB, mode=mode,
                                                  when=when)
                try:
                    ms = device_ms(fns["step"], device, replays)
                    same = bool(torch.equal(fns["step"](), want))
                finally:
                    if prefetcher is not None:
                        prefetcher.remove()
                entry = {"variant": label, "ms": round(ms, 4),
                         "floor_ratio": round(ms / floor, 4), "same_tokens": same}
                row["variants"].append(entry)
                print(name, "batch", b, json.dumps(entry), flush=True)
            base = min(v["ms"] for v in row["variants"] if v["variant"].startswith("off"))
            row["noise_ms"] = round(abs(row["variants"][0]["ms"] - row["variants"][-1]["ms"]), 4)
            row["speedup_over_off"] = {v["variant"]: round(base / v["ms"], 4)
                                       for v in row["variants"]}
            result["batches"].append(row)
    del llm, runner, model
    torch.cuda.empty_cache() if device == "cuda" else None
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("--engines", default="bf16,4bit")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--smoke", action="store_true", help="tiny shape on the CPU")
    args = ap.parse_args(argv)
    device = "cpu" if args.smoke else "cuda"
    dtype = torch.float32 if args.smoke else torch.bfloat16
    shape = {**LLAMA3_8B, **(SMOKE_SHAPE if args.smoke else {})}
    if args.smoke:
        shape["num_hidden_layers"] = 2
    ceilings = measure_ceilings(device, dtype)
    print("ceilings:", ceilings, flush=True)
    variants = VARIANTS[:2] if args.smoke else VARIANTS
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "context": args.context, "ceilings": ceilings, "engines": []}
    for name in args.engines.split(","):
        if name not in ENGINES:
            ap.error(f"--engines: unknown {name!r}; known: {', '.join(ENGINES)}")
        result["engines"].append(run_engine(
            name, shape, [int(b) for b in args.batches.split(",")], args.context, ceilings,
            args.replays, variants, device, dtype))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "l2_prefetch.json").write_text(json.dumps(result, indent=1))
    print(json.dumps([{"engine": e["engine"], "batch": r["batch"], "floor_ms": r["floor_ms"],
                       "noise_ms": r["noise_ms"], "speedups": r["speedup_over_off"]}
                      for e in result["engines"] for r in e["batches"]], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
