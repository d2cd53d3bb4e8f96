"""Where a decode step's host time goes on the GPU machine, with async scheduling on and
off: per-phase host ms, time blocked on the device, device busy/idle per step (CUDA
events), and a cProfile of the steps. Llama-3-8B shape (or ``--shape``), its own layers or
``--layers``.

    python -m benchmarks.gpu.host_profile --layers 32 --batch 256 --context 512 --out DIR
    python -m benchmarks.gpu.host_profile --shape qwen2.5-0.5b --batch 256 --out DIR
    python -m benchmarks.gpu.host_profile --smoke --layers 1 --batch 4 --context 16 --out DIR
    python -m benchmarks.gpu.host_profile --layers 32 --core-encoding --out DIR
        # as `kubellm serve`'s engine core: running rows come out as compact deltas
        # (OutputProcessor.delta_encoder) and each step's outputs are encoded for the
        # front ends (deltas, then msgpack); core_encode_ms and core_ms join the figures
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.shapes import SHAPES


def encode_each_step(engine) -> dict:
    """Make ``engine.step`` also encode its outputs as the engine core does for its front
    ends; returns the counter of seconds spent encoding (``encode_s``), which
    ``reset_counters`` does not know about: zero it with the engine's."""
    from kubellm.runtime.engine_core import wire
    from kubellm.runtime.engine_core.output_delta import DeltaEncoder
    deltas, codec = DeltaEncoder(), wire.Codec()
    engine.output.delta_encoder = deltas
    counter = {"encode_s": 0.0}
    step = engine.step

    def step_and_encode():
        outputs = step()
        t = time.perf_counter()
        codec.encode([wire.OUTPUTS, [o if type(o) is list else deltas.encode(o)
                                     for o in outputs], [], [], {}])
        counter["encode_s"] += time.perf_counter() - t
        return outputs
    engine.step = step_and_encode
    return counter


def profile_mode(llm, run_ahead: bool, batch: int, context: int, steps: int,
                 encoding: dict | None = None) -> dict:
    vocab = llm.engine.vocab_size
    from kubellm.runtime import SamplingParams
    from kubellm.runtime.cli.bench.steady import fill_until_decoding, time_steps
    engine = llm.engine
    engine.set_async_scheduling(run_ahead)
    rng = random.Random(batch + context)
    params = SamplingParams(temperature=0, max_tokens=2 * steps + 8, ignore_eos=True,
                            detokenize=False)
    ids = [f"{run_ahead}-{i}" for i in range(batch)]
    fill_until_decoding(engine, {i: [rng.randrange(16, vocab - 16) for _ in range(context)]
                                 for i in ids}, params)
    for _ in range(4):   # untimed: first uses of lazily loaded CUDA kernels
        engine.step()
    if encoding is not None:
        encoding["encode_s"] = 0.0
    result = {"async_scheduling": run_ahead, **time_steps(engine, steps)}
    if encoding is not None:
        result["core_encode_ms"] = round(encoding["encode_s"] / steps * 1e3, 3)
        result["core_ms"] = round(result["host_ms"] + result["core_encode_ms"], 3)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        engine.step()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(30)        # where the time is spent
    stats.sort_stats("cumulative").print_stats(20)     # and under which engine phase
    result["profile"] = text.getvalue()
    for i in ids:
        engine.abort_request(i)
        if encoding is not None:
            engine.output.delta_encoder.forget(i)   # as the engine core does
    engine.set_async_scheduling(True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama3-8b",
                    choices=sorted(SHAPES),
                    help="the model shape (benchmarks/common/shapes.py; --smoke: a tiny Llama)")
    ap.add_argument("--layers", type=int, help="layers (default: the shape's own)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--out", default=".")
    ap.add_argument("--core-encoding", action="store_true",
                    help="running rows as compact deltas and each step's outputs encoded, "
                         "as the engine core sends them (core_encode_ms, core_ms)")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny shape on the CPU, to check the script itself")
    args = ap.parse_args()
    from kubellm.runtime import LLM

    from benchmarks.common.shapes import LLAMA3_8B, SMOKE_LLAMA, write_config
    small = SMOKE_LLAMA if args.smoke else {}
    shape = LLAMA3_8B if args.smoke else SHAPES[args.shape]
    layers = args.layers or shape["num_hidden_layers"]
    model_dir = write_config(shape, Path(tempfile.mkdtemp()) / "m",
                             num_hidden_layers=layers, **small)
    llm = LLM(model_dir, load_format="dummy", skip_tokenizer_init=True, max_model_len=4096,
              max_num_seqs=args.batch, max_num_batched_tokens=8192)
    # as the engine core process does after startup: no full collections over the
    # startup heap, no young collection every streamed step (gc_heap.py)
    from kubellm.runtime.core.gc_heap import freeze_startup_heap, thaw_startup_heap
    encoding = encode_each_step(llm.engine) if args.core_encoding else None
    freeze_startup_heap()
    results = [profile_mode(llm, ahead, args.batch, args.context, args.steps, encoding)
               for ahead in (False, True)]
    thaw_startup_heap()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for r in results:
        (out / f"host_profile_async_{r['async_scheduling']}.txt").write_text(r.pop("profile"))
        print(json.dumps({"shape": args.shape, "layers": layers, "batch": args.batch, **r}),
              flush=True)
    (out / f"host_profile_{args.shape}_{layers}l.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
