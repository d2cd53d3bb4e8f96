"""Host (CPU) work per decode step at a given batch, on a tiny model on the CPU.

The scheduler, input preparation and post-processing are the same code on CPU and GPU;
this isolates them from the forward pass so they can be profiled anywhere:

    python -m benchmarks.cpu.host_overhead [--batch 256] [--steps 64] [--profile]
    python -m benchmarks.cpu.host_overhead --clock cpu   # on a shared, loaded machine
    python -m benchmarks.cpu.host_overhead --context-spread --no-steady-decode
    python -m benchmarks.cpu.host_overhead --core-encoding   # + the engine core's output
        # encoding per step (deltas, then msgpack: what `kubellm serve` sends its front ends)

``--clock cpu`` times every phase with this thread's CPU time instead of the wall clock
(the engine's own timers included): the host work is pure CPU work here, and CPU time
does not count the moments other processes hold the core (run it with
OMP_NUM_THREADS=1, so that torch's ops run on this thread).
"""
from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--output-kind", default="cumulative", choices=["cumulative", "final_only"])
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--sort", default="cumulative", help="the profile's order (pstats keys)")
    ap.add_argument("--top", type=int, default=25, help="functions the profile prints")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    ap.add_argument("--core-encoding", action="store_true",
                    help="also time the engine core's delta encoding and msgpack of each "
                         "step's outputs (core_encode_ms)")
    ap.add_argument("--no-delta-rows", action="store_true",
                    help="with --core-encoding: build every output and encode it, as the "
                         "core did before s24 (else steady rows come out as deltas: "
                         "OutputProcessor.delta_encoder)")
    ap.add_argument("--context-spread", action="store_true",
                    help="prompts of random lengths in [context/2, 3*context/2) instead of "
                         "all --context long (rows cross KV block boundaries in different "
                         "steps, as in serving)")
    ap.add_argument("--output-spread", action="store_true",
                    help="max_tokens of random lengths in [steps/4, 2*steps) instead of "
                         "all past --steps (requests finish along the run: the batch "
                         "shrinks, as when serving under a light load)")
    ap.add_argument("--no-steady-decode", action="store_true",
                    help="the scheduler's full loop every step (its steady decode plan "
                         "off: core/steady_decode.py)")
    ap.add_argument("--no-async-scheduling", action="store_true",
                    help="wait for every step (the engine's async scheduling off)")
    ap.add_argument("--no-gc-freeze", action="store_true",
                    help="leave the collector as Python sets it up (the engine core "
                         "process freezes its startup heap: freeze_startup_heap)")
    args = ap.parse_args()
    if args.clock == "cpu":
        time.perf_counter = time.thread_time      # every timer in the process, engine's too

    import torch
    import transformers
    from kubellm.runtime import LLM, SamplingParams
    from kubellm.runtime.cli.bench.steady import fill_until_decoding, host_ms_per_step

    from benchmarks.common.tiny_models import COMMON
    tmp = Path(tempfile.mkdtemp())
    config = transformers.LlamaConfig(**{**COMMON, "vocab_size": 1024, "hidden_size": 32,
                                         "intermediate_size": 64, "num_hidden_layers": 1,
                                         "num_attention_heads": 2, "num_key_value_heads": 1,
                                         "max_position_embeddings": 4096})
    config.save_pretrained(tmp)
    # the CPU always: on a GPU host "auto" picked CUDA, so the run compiled kernels and
    # captured graphs for this tiny model and timed the GPU path (2026-12-02 call 4 on
    # the H200 host: the first run passed its 30 s limit; most likely the compiles, which
    # the second run then found cached)
    longest = args.context * 3 // 2 if args.context_spread else args.context
    llm = LLM(str(tmp), load_format="dummy", skip_tokenizer_init=True, device="cpu",
              max_num_seqs=args.batch, max_num_batched_tokens=args.batch * longest,
              num_kv_blocks=args.batch * (longest + args.steps + 32) // 16 + 16,
              async_scheduling=not args.no_async_scheduling)
    engine = llm.engine
    if args.no_steady_decode:
        engine.scheduler.steady_decode = False
    # what the engine core process does after startup, as the commit under test has it
    # (its freeze_startup_heap); spelled out for commits from before it
    # (ab_host_overhead.sh runs this file on older commits)
    if not args.no_gc_freeze:
        try:
            from kubellm.runtime.core.gc_heap import freeze_startup_heap
        except ImportError:
            gc.collect()
            gc.freeze()
        else:
            freeze_startup_heap()
    rng = random.Random(0)
    params = SamplingParams(temperature=0, max_tokens=args.steps + 8, ignore_eos=True,
                            detokenize=False, output_kind=args.output_kind)
    lengths = [rng.randrange(args.context // 2, longest) if args.context_spread
               else args.context for _ in range(args.batch)]
    prompts = {str(i): [rng.randrange(3, 1000) for _ in range(n)]
               for i, n in enumerate(lengths)}
    if args.output_spread:   # one SamplingParams per request (fill_until_decoding: one)
        for request_id, prompt in prompts.items():
            engine.add_request(request_id, prompt, params.clone(
                max_tokens=rng.randrange(max(2, args.steps // 4), 2 * args.steps)))
        prompts = {}
    fill_until_decoding(engine, prompts, params)
    profiler = None
    if args.profile:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    encode = None
    if args.core_encoding:
        from kubellm.runtime.engine_core import wire
        from kubellm.runtime.engine_core.output_delta import DeltaEncoder
        deltas, codec = DeltaEncoder(), wire.Codec()
        if not args.no_delta_rows:   # as EngineCore sets it up
            engine.output.delta_encoder = deltas
        encode_s = 0.0

        def encode(outputs):
            nonlocal encode_s
            t = time.perf_counter()
            codec.encode([wire.OUTPUTS, [o if type(o) is list else deltas.encode(o)
                                         for o in outputs], [], [], {}])
            encode_s += time.perf_counter() - t
    t0 = time.perf_counter()
    for _ in range(args.steps):
        outputs = engine.step()
        if encode is not None:
            encode(outputs)
    wall = time.perf_counter() - t0
    if profiler:
        profiler.disable()
        import pstats
        pstats.Stats(profiler).sort_stats(args.sort).print_stats(args.top)
    result = {"batch": args.batch, "context": args.context,
              "context_spread": args.context_spread, "output_spread": args.output_spread,
              "steady_decode": getattr(engine.scheduler, "steady_decode", False),
              "output_kind": args.output_kind,
              "async_scheduling": engine.run_ahead,
              **host_ms_per_step(engine, args.steps),
              "step_ms": round(wall / args.steps * 1e3, 3),
              "torch_threads": torch.get_num_threads(), "clock": args.clock}
    if encode is not None:
        result["core_encode_ms"] = round(encode_s / args.steps * 1e3, 3)
        result["core_ms"] = round(result["host_ms"] + result["core_encode_ms"], 3)
        result["delta_rows"] = not args.no_delta_rows
    print(json.dumps(result))
    gc.unfreeze()   # the exit's last collection frees them (else nanobind reports leaks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
