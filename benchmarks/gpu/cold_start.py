"""Cold start of one replica: seconds from `LLM(model)` to an engine ready to serve, for
a Llama-3-8B-shape checkpoint on local disk, against the startup budget the operator
gives such a pod (operator/kubellm/operator/builders/startup.py).

    python -m benchmarks.gpu.cold_start --out DIR            # on the GPU machine
    python -m benchmarks.gpu.cold_start --out DIR --smoke    # a tiny shape on the CPU

It writes a random-weight bf16 checkpoint (as make_random_llama does, no tokenizer), then
builds the engine twice: once with the files in the page cache (just written), once after
dropping the page cache when the machine lets it (root; never with --smoke), which is
what a pod reading
from a model-cache claim sees. Reports both, the seconds per GiB of weights, and whether
they fit the startup budget (300 s + 4 s per GiB for weights on a volume).
Writes cold_start.json in DIR.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import time

GIB = 1024 ** 3
FULL = dict(vocab_size=128256, hidden_size=4096, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
            max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
            tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001)
SMOKE = dict(FULL, vocab_size=1024, hidden_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
             max_position_embeddings=512, bos_token_id=1, eos_token_id=2)
SHARD_BYTES = 4 << 30


def write_checkpoint(out: pathlib.Path, shape: dict, device: str) -> float:
    """A sharded bf16 safetensors checkpoint of ``shape``; returns its size in bytes."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**shape, torch_dtype="bfloat16")
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in LlamaForCausalLM(config).state_dict().items()}
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    gen = torch.Generator(device).manual_seed(0)
    shard, size, total, weight_map, shards = {}, 0, 0, {}, 0

    def flush() -> None:
        nonlocal shard, size, shards
        shards += 1
        name = f"model-{shards:05d}.safetensors"
        save_file(shard, str(out / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
        shard, size = {}, 0

    for name, dims in shapes.items():
        if name.endswith("norm.weight"):
            t = torch.ones(dims, dtype=torch.bfloat16)
        else:
            t = (torch.randn(dims, generator=gen, device=device) * 0.02).to(torch.bfloat16)
        shard[name] = t.cpu()
        size += t.numel() * 2
        total += t.numel() * 2
        if size >= SHARD_BYTES:
            flush()
    if shard:
        flush()
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}))
    return float(total)


def drop_page_cache() -> bool:
    """Ask the kernel to drop clean pages (root only); False when it refuses."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def engine_ready_seconds(model: pathlib.Path, device: str) -> float:
    """From nothing to an engine that can serve (weights, KV profiling, CUDA graphs)."""
    import gc

    import torch
    from kubellm.runtime import LLM

    started = time.perf_counter()
    small = {"num_kv_blocks": 64, "dtype": "float32", "max_model_len": 256}
    llm = LLM(str(model), device=device, skip_tokenizer_init=True,
              **(small if device == "cpu" else {"max_model_len": 2048}))
    seconds = time.perf_counter() - started
    del llm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for cold_start.json")
    parser.add_argument("--smoke", action="store_true", help="a tiny shape on the CPU")
    parser.add_argument("--workdir", default=None,
                        help="where the checkpoint is written (default: OUT/../coldstart-model"
                             ", removed at the end)")
    args = parser.parse_args(argv)
    import torch
    # (Not validation.defaulted_spec: the GPU image has no jsonschema; startup_seconds
    # reads only these fields.)
    from kubellm.operator.builders.startup import (BASE_SECONDS, LOAD_SECONDS_PER_GIB,
                                                   startup_seconds)

    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    if not args.smoke and device == "cpu":
        print("cold_start: no CUDA device; use --smoke on a CPU", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = pathlib.Path(args.workdir or out.parent / "coldstart-model")
    try:
        started = time.perf_counter()
        size = write_checkpoint(workdir, SMOKE if args.smoke else FULL, device)
        written = time.perf_counter() - started
        cached = engine_ready_seconds(workdir, device)
        # Never on a shared CPU machine (--smoke): it would slow everyone else down.
        dropped = not args.smoke and drop_page_cache()
        cold = engine_ready_seconds(workdir, device) if dropped else None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    gib = size / GIB
    # The budget the operator gives an 8B model whose weights sit on a cache claim.
    spec = {"model": {"source": {"huggingFace": "org/model"}, "parameters": "8B",
                      "cache": {}}}
    budget = startup_seconds(spec)
    worst = cold if cold is not None else cached
    result = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "smoke": args.smoke, "weights_gib": round(gib, 6),
        "write_seconds": round(written, 2),
        "engine_ready_seconds_page_cache": round(cached, 2),
        "engine_ready_seconds_cold": None if cold is None else round(cold, 2),
        "page_cache_dropped": dropped,
        "seconds_per_gib": round(worst / gib, 3),
        "startup_budget_seconds": budget,
        "budget_model": f"{BASE_SECONDS} s + {LOAD_SECONDS_PER_GIB} s/GiB of 8B bf16 weights",
        "within_budget": worst <= budget,
        "command": "python -m benchmarks.gpu.cold_start" + (" --smoke" if args.smoke else ""),
    }
    (out / "cold_start.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
