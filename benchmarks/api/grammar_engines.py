"""Grammar engines compared where they differ: the host time to fill a batch-64 token mask
per step (and to advance the matchers by the sampled tokens), xgrammar as kubellm calls
it (one matcher at a time, worker/grammar.py) against llguidance (its batch executor).

Both fill the same bitmask layout (int32 words, bit j of word i = token 32 i + j), so
applying it to the logits costs the same whichever engine filled it: that part, on the
CPU and the GPU, is in mask_bench.py. Each sequence walks its grammar at random: every
step it takes a uniformly random allowed token (hard states are reached); a sequence
whose document ends starts again.

    python -m benchmarks.api.grammar_engines --out benchmarks/results/api [--smoke]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.api.mask_bench import SPECS


class Xgrammar:
    name = "xgrammar"

    def __init__(self, tokenizer, vocab: int, eos: int):
        from kubellm.runtime.worker.grammar import GrammarCompiler
        self.compiler = GrammarCompiler(tokenizer, vocab, [eos])

    def compile(self, kind: str):
        from kubellm.runtime.core.structured_outputs import StructuredOutputsParams
        return self.compiler.compile(StructuredOutputsParams(**SPECS[kind]))

    def make(self, compiled):
        return self.compiler.matcher(compiled)

    def fill(self, matchers, bitmask) -> None:
        for i, state in enumerate(matchers):
            state.fill(bitmask, i)

    def accept(self, state, token: int) -> bool:
        # what GrammarState.advance does for each new token
        state.num_consumed += 1
        return state.matcher.accept_token(token) and not state.matcher.is_terminated()


class Llguidance:
    name = "llguidance"

    def __init__(self, tokenizer, vocab: int, eos: int):
        import llguidance
        import llguidance.hf
        self.llg = llguidance
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab, eos_token=eos)
        self.executor = llguidance.LLExecutor(num_threads=1)

    def compile(self, kind: str):
        llg, spec = self.llg, SPECS[kind]
        if "json" in spec:
            grammar = llg.LLMatcher.grammar_from_json_schema(spec["json"])
        elif "json_object" in spec:
            grammar = llg.LLMatcher.grammar_from_json_schema({"type": "object"})
        elif "regex" in spec:
            grammar = llg.LLMatcher.grammar_from_regex(spec["regex"])
        elif "choice" in spec:
            grammar = llg.grammar_from("choice", json.dumps(spec["choice"]))
        else:
            grammar = llg.grammar_from("gbnf", spec["grammar"])
        template = llg.LLMatcher(self.tokenizer, grammar, log_level=1)
        if template.is_error():
            raise ValueError(template.get_error())
        return template

    def make(self, template):
        return template.deep_copy()     # 2-9 us, where a new LLMatcher costs 0.3-2 ms

    def fill(self, matchers, bitmask) -> None:
        self.executor.unsafe_compute_mask_ptr([(m, i) for i, m in enumerate(matchers)],
                                              bitmask.data_ptr(), bitmask.shape[1] * 4,
                                              bitmask.shape[0])

    def accept(self, matcher, token: int) -> bool:
        return matcher.consume_token(token) and not matcher.is_stopped() \
            and not matcher.is_error()


def walk(engine, kind: str, batch: int, steps: int, vocab: int, seed: int = 0) -> dict:
    import torch
    rng = random.Random(seed)
    t0 = time.perf_counter()
    compiled = engine.compile(kind)
    compile_ms = (time.perf_counter() - t0) * 1e3
    matchers = [engine.make(compiled) for _ in range(batch)]
    bitmask = torch.full((batch, (vocab + 31) // 32), -1, dtype=torch.int32)
    fill, accept, documents = [], [], 0
    for _ in range(steps):
        bitmask.numpy().fill(-1)
        t0 = time.perf_counter()
        engine.fill(matchers, bitmask)
        fill.append((time.perf_counter() - t0) * 1e6 / batch)
        bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, bitorder="little")
        tokens = [rng.choice(np.flatnonzero(bits[i, :vocab]).tolist() or [0])
                  for i in range(batch)]
        t0 = time.perf_counter()
        alive = [engine.accept(m, t) for m, t in zip(matchers, tokens)]
        accept.append((time.perf_counter() - t0) * 1e6 / batch)
        for i, ok in enumerate(alive):
            if not ok:
                matchers[i] = engine.make(compiled)
                documents += 1
    return {"engine": engine.name, "kind": kind, "compile_ms": round(compile_ms, 2),
            "fill_us_per_seq": round(statistics.median(fill), 2),
            "accept_us_per_seq": round(statistics.median(accept), 2),
            "documents_finished": documents}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the "
                                                      "embedded SmolLM2's)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--smoke", action="store_true", help="a few steps, for CI")
    args = ap.parse_args()
    if args.smoke:
        args.batch, args.steps = 4, 3
    import torch
    from transformers import AutoTokenizer
    torch.set_num_threads(1)
    folder = args.tokenizer
    if folder is None:
        from kubellm.runtime.loading.default_model import default_model_path
        folder = default_model_path()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vocab, eos = len(tokenizer), tokenizer.eos_token_id
    rows, skipped = [], []
    for engine_cls in (Xgrammar, Llguidance):
        try:
            t0 = time.perf_counter()
            engine = engine_cls(tokenizer, vocab, eos)
            prepare_s = time.perf_counter() - t0
        except ImportError as exc:
            skipped.append(f"{engine_cls.name}: {exc}")
            continue
        for kind in SPECS:
            rows.append({**walk(engine, kind, args.batch, args.steps, vocab),
                         "tokenizer_prepare_s": round(prepare_s, 2)})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"batch": args.batch, "steps": args.steps, "vocab_size": vocab, "rows": rows,
              "skipped": skipped}
    (out / "grammar_engines.json").write_text(json.dumps(result, indent=1))
    lines = [f"batch {args.batch}, vocab {vocab}, median of {args.steps} steps "
             "(us per sequence and step)", "",
             "| engine | kind | compile ms | fill us | accept us |", "|---|---|---|---|---|"]
    lines += [f"| {r['engine']} | {r['kind']} | {r['compile_ms']} | {r['fill_us_per_seq']} | "
              f"{r['accept_us_per_seq']} |" for r in rows]
    lines += [f"\nnot run: {s}" for s in skipped]
    (out / "grammar_engines.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
