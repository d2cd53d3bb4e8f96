"""Structured outputs: what the grammar mask costs per step at batch 64, through the
sampler's own code (worker/logits_constraints.py, worker/grammar.py, xgrammar).

For each kind of spec (JSON schema, JSON object, regex, choice, EBNF grammar) 64
sequences walk their grammar at random (temperature 1, so hard states are reached; a
sequence that ends starts again). Per step it reports the host time to bring the
matchers up to date and fill the bitmask (per sequence), the time to copy it and apply it
to the logits on the device, and the sampler's whole step with those 64 constraints
against the same step without any (the overhead a structured batch pays).

    python -m benchmarks.api.mask_bench --out benchmarks/results/api [--device cuda]
        [--tokenizer DIR] [--vocab-size 128256] [--smoke]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "color": {"enum": ["red", "green", "blue"]},
    "scores": {"type": "array", "items": {"type": "number"}, "maxItems": 8}},
    "required": ["name", "age", "color", "scores"], "additionalProperties": False}
SPECS = {
    "json_schema": {"json": SCHEMA},
    "json_object": {"json_object": True},
    "regex": {"regex": r"[a-z]+@[a-z]+\.(com|org|net)"},
    "choice": {"choice": ["positive", "negative", "neutral"]},
    "grammar": {"grammar": 'root ::= expr\nexpr ::= term (("+" | "-") term)*\n'
                           'term ::= [0-9]+ | "(" expr ")"'},
}


def sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_kind(kind: str, compiler, sampler_cls, batch: int, steps: int, vocab: int,
             device, eos: int) -> dict:
    import torch
    from kubellm.runtime.core.sampling_params import SamplingParams
    from kubellm.runtime.core.structured_outputs import StructuredOutputsParams
    from kubellm.runtime.worker.logits_constraints import LogitsConstraints
    from kubellm.runtime.worker.sampler import SamplingState

    spec = StructuredOutputsParams(**SPECS[kind])
    t0 = time.perf_counter()
    compiled = compiler.compile(spec)
    compile_ms = (time.perf_counter() - t0) * 1e3
    params = SamplingParams(temperature=1.0, structured_outputs=spec)

    def fresh():
        constraints = LogitsConstraints.create(params, vocab, device,
                                               compiler.matcher(compiled))
        return SamplingState.create(params, [1], constraints=constraints)
    states = [fresh() for _ in range(batch)]
    plain = [SamplingState.create(SamplingParams(temperature=1.0), [1]) for _ in range(batch)]
    sampler = sampler_cls({eos})
    applier = sampler._constraints
    generator = torch.Generator(device=device).manual_seed(0)
    fill, apply, with_mask, without = [], [], [], []
    restarts = 0
    for _ in range(steps):
        logits = torch.randn(batch, vocab, device=device, generator=generator)
        # the host part: matchers catch up, bitmask filled (as _apply_grammars does)
        t0 = time.perf_counter()
        bitmask = applier._host_bitmask(batch, (vocab + 31) // 32, device)
        bitmask.numpy().fill(-1)
        for i, s in enumerate(states):
            s.constraints.grammar.advance(s.output_token_ids)
            s.constraints.grammar.fill(bitmask, i)
        fill.append((time.perf_counter() - t0) * 1e6 / batch)
        # the device part: copy and apply
        import xgrammar as xgr
        work = logits.clone()
        sync(device)
        t0 = time.perf_counter()
        mask = bitmask if device.type == "cpu" else bitmask.to(device, non_blocking=True)
        xgr.apply_token_bitmask_inplace(work, mask, vocab_size=vocab,
                                        indices=list(range(batch)))
        sync(device)
        apply.append((time.perf_counter() - t0) * 1e3)
        # the sampler's whole step, without and with the constraints
        sync(device)
        t0 = time.perf_counter()
        sampler.sample(logits, plain, constrained=False).result()
        sync(device)
        without.append((time.perf_counter() - t0) * 1e3)
        for s in states:   # undo the catch-up above so the timed step does it again
            s.constraints.grammar.num_consumed = len(s.output_token_ids)
        t0 = time.perf_counter()
        tokens = sampler.sample(logits, states, constrained=True).result().token_ids
        sync(device)
        with_mask.append((time.perf_counter() - t0) * 1e3)
        for i, token in enumerate(tokens):
            grammar = states[i].constraints.grammar
            if token == eos or grammar.is_broken:
                states[i] = fresh()
                restarts += 1
            else:
                states[i].output_token_ids.append(token)
    med = statistics.median
    return {"kind": kind, "compile_ms": round(compile_ms, 2),
            "fill_us_per_seq": round(med(fill), 2), "apply_ms": round(med(apply), 3),
            "sampler_ms_plain": round(med(without), 3),
            "sampler_ms_constrained": round(med(with_mask), 3),
            "overhead_ms_per_step": round(med(with_mask) - med(without), 3),
            "documents_finished": restarts}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the "
                                                      "embedded SmolLM2's)")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="model vocabulary (>= the tokenizer's; padded ids never allowed)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default: torch's; 1 keeps a loaded machine's "
                         "thread-pool contention out of the figures)")
    ap.add_argument("--smoke", action="store_true", help="a few steps, for CI")
    args = ap.parse_args()
    if args.smoke:
        args.batch, args.steps = 4, 3

    import torch
    from transformers import AutoTokenizer
    if args.threads:
        torch.set_num_threads(args.threads)

    from kubellm.runtime.worker.grammar import GrammarCompiler
    from kubellm.runtime.worker.sampler import Sampler
    folder = args.tokenizer
    if folder is None:
        from kubellm.runtime.loading.default_model import default_model_path
        folder = default_model_path()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vocab = args.vocab_size or len(tokenizer)
    device = torch.device(args.device)
    eos = tokenizer.eos_token_id
    t0 = time.perf_counter()
    compiler = GrammarCompiler(tokenizer, vocab, [eos])
    prepare_s = time.perf_counter() - t0
    rows = [run_kind(kind, compiler, Sampler, args.batch, args.steps, vocab, device, eos)
            for kind in SPECS]
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "batch": args.batch, "steps": args.steps, "vocab_size": vocab,
              "torch_threads": torch.get_num_threads(),
              "tokenizer_prepare_s": round(prepare_s, 2), "kinds": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"mask_bench_{device.type}"
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    lines = [f"batch {args.batch}, vocab {vocab}, {result['device']}, torch threads "
             f"{result['torch_threads']}, median of {args.steps} steps", "",
             "| kind | compile ms | fill us/seq | apply ms | sampler ms plain | "
             "sampler ms constrained | overhead ms/step |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['kind']} | {r['compile_ms']} | {r['fill_us_per_seq']} | "
              f"{r['apply_ms']} | {r['sampler_ms_plain']} | {r['sampler_ms_constrained']} | "
              f"{r['overhead_ms_per_step']} |" for r in rows]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
