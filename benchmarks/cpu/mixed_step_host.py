"""Host (CPU) work of a mixed step: one new prompt joining running decodes, by KV pool size.

    python -m benchmarks.cpu.mixed_step_host [--blocks 55167] [--decodes 20] [--prompt 512]

Prints one JSON line per timed step pair (the step that schedules the prefill and the
next): wall ms of the two and the engine's host phases per step. On CUDA the same steps
took 35-73 ms in the engine core (H200, 2026-12-02 calls 8-10); on a tiny CPU model this
separates the host's share (scheduling, input preparation, post-processing) from the
device's.
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=55167, help="KV pool (the H200's: 55,167)")
    ap.add_argument("--decodes", type=int, default=20)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=6)
    args = ap.parse_args()

    import transformers
    from kubellm.runtime import LLM, SamplingParams
    from kubellm.runtime.cli.bench.steady import (
        fill_until_decoding, host_ms_per_step, reset_counters,
    )

    from benchmarks.common.tiny_models import COMMON
    tmp = Path(tempfile.mkdtemp())
    transformers.LlamaConfig(**{**COMMON, "vocab_size": 1024, "hidden_size": 32,
                                "intermediate_size": 64, "num_hidden_layers": 1,
                                "num_attention_heads": 2, "num_key_value_heads": 1,
                                "max_position_embeddings": 4096}).save_pretrained(tmp)
    llm = LLM(str(tmp), load_format="dummy", skip_tokenizer_init=True, max_num_seqs=256,
              max_num_batched_tokens=8192, num_kv_blocks=args.blocks, max_model_len=2048)
    engine = llm.engine
    rng = random.Random(0)

    def prompt():
        return [rng.randrange(3, 1000) for _ in range(args.prompt)]
    params = SamplingParams(temperature=0, max_tokens=1000, ignore_eos=True, detokenize=False)
    fill_until_decoding(engine, {f"d{i}": prompt() for i in range(args.decodes)}, params)
    for k in range(args.repeats):
        for _ in range(3):   # decode steps between arrivals
            engine.step()
        reset_counters(engine)
        engine.add_request(f"new{k}", prompt(), params)
        start = time.perf_counter()
        engine.step()
        engine.step()
        print(json.dumps({"blocks": args.blocks, "wall_ms_two_steps":
                          round((time.perf_counter() - start) * 1e3, 3),
                          **host_ms_per_step(engine, 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
