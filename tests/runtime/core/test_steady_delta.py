"""A running row that went out as a compact delta keeps going out that way from a short
check per step (``Request.steady_delta``, read by ``OutputProcessor.process``): its new
token against EOS, its length against its limits, its metrics dict against a preemption.
Whatever happens to the rows, the deltas must be the ones that building every
RequestOutput and encoding it gives."""
from __future__ import annotations

import random

import pytest
import torch
import transformers

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.engine_core.output_delta import DeltaEncoder

VOCAB = 64   # small: EOS and stop token ids come up often


@pytest.fixture(scope="module")
def small_vocab_model(tmp_path_factory) -> str:
    """A one-layer random Llama of 64 tokens, saved like a real checkpoint."""
    path = tmp_path_factory.mktemp("small-vocab-llama")
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
        initializer_range=0.5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


def _plain(delta: list) -> list:
    """A delta with its metrics' timestamps reduced to whether they are set (two engines'
    clocks differ); the preemption count stays."""
    sets = delta[1] if len(delta) > 2 else None
    if not sets or "metrics" not in sets:
        return delta
    metrics = {k: v if k == "num_preemptions" else v is None
               for k, v in sets["metrics"].items()}
    return [delta[0], {**sets, "metrics": metrics}, *delta[2:]]


def _random_params(rng: random.Random, index: int) -> SamplingParams:
    kind, max_tokens = rng.random(), rng.randint(1, 40)
    return SamplingParams(
        max_tokens=max_tokens, min_tokens=min(max_tokens, rng.choice([0, 0, 0, 2])),
        ignore_eos=rng.random() < 0.3, detokenize=False,
        temperature=rng.choice([0.0, 1.0]), seed=index,
        logprobs=1 if kind < 0.12 else None,
        n=2 if 0.12 <= kind < 0.2 else 1,
        stop_token_ids=[rng.randrange(3, VOCAB)] if 0.2 <= kind < 0.3 else None)


def _delta_streams(model_dir: str, case: int, rows_as_deltas: bool):
    """Per step, the deltas the engine core would send for case ``case``'s random run,
    and counts of what the run went through."""
    rng = random.Random(case)
    llm = LLM(model_dir, dtype="float32", device="cpu", skip_tokenizer_init=True,
              block_size=4, num_kv_blocks=rng.choice([14, 24, 400]),
              max_model_len=rng.choice([40, 200]), max_num_seqs=rng.choice([4, 8]),
              max_num_batched_tokens=64, async_scheduling=case % 2 == 0)
    engine = llm.engine
    engine.output.eos_token_ids = set(rng.sample(range(3, VOCAB), 2))
    encoder = DeltaEncoder()
    if rows_as_deltas:
        engine.output.delta_encoder = encoder
    arrivals = sorted(rng.randrange(0, 60) for _ in range(rng.randint(6, 14)))
    aborts = {rng.randrange(5, 80): None for _ in range(2)}
    swap_at = rng.randrange(10, 60) if case % 3 == 0 else None
    steps, seen = [], {"steady_rows": 0, "preemptions": 0}
    added = 0
    for step in range(400):
        while added < len(arrivals) and arrivals[added] <= step:
            prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 30))]
            engine.add_request(f"r{added}", prompt, _random_params(rng, added))
            added += 1
        if step in aborts and engine.output.groups:
            victim = rng.choice(sorted(engine.output.groups))
            engine.abort_request(victim)
            encoder.forget(victim)   # as the engine core does
        if step == swap_at:   # a new consumer: every request's next delta is whole again
            encoder = DeltaEncoder()
            if rows_as_deltas:
                engine.output.delta_encoder = encoder
        if added == len(arrivals) and not engine.has_unfinished_requests():
            break
        seen["steady_rows"] += sum(seq.steady_delta is not None
                                   for group in engine.output.groups.values()
                                   for seq in group.sequences)
        steps.append([_plain(o if type(o) is list else encoder.encode(o))
                      for o in engine.step()])
    seen["preemptions"] = engine.scheduler.num_preemptions
    llm.shutdown()
    return steps, seen


def _finish_reasons(steps: list) -> set:
    return {sets.get("finish_reason") for deltas in steps for delta in deltas
            if len(delta) > 2 for _, _, sets in delta[2] if sets}


def test_steady_rows_send_what_encoding_every_output_sends(small_vocab_model):
    """Random runs (arrivals, aborts, EOS with and without min_tokens, stop token ids,
    max_tokens, max_model_len, preemptions from a small KV pool, n=2, logprobs, a new
    encoder midway, async scheduling and not): step by step the same deltas, with most
    rows taking the steady check."""
    totals = {"steady_rows": 0, "preemptions": 0}
    reasons = set()
    for case in range(12):
        built, _ = _delta_streams(small_vocab_model, case, rows_as_deltas=False)
        given, seen = _delta_streams(small_vocab_model, case, rows_as_deltas=True)
        assert len(given) == len(built), case
        for step, (want, got) in enumerate(zip(built, given)):
            assert got == want, (case, step)
        for key in totals:
            totals[key] += seen[key]
        reasons |= _finish_reasons(built)
    # the runs went through what the check must catch
    assert totals["preemptions"] > 0 and {"stop", "length"} <= reasons, (totals, reasons)
    assert totals["steady_rows"] > 300, totals


def test_a_new_encoder_drops_every_steady_row(small_vocab_model):
    llm = LLM(small_vocab_model, dtype="float32", device="cpu", skip_tokenizer_init=True)
    engine = llm.engine
    encoder = engine.output.delta_encoder = DeltaEncoder()
    for i in range(3):
        engine.add_request(f"r{i}", [5 + i, 6], SamplingParams(max_tokens=20, ignore_eos=True,
                                                              detokenize=False))
    for _ in range(6):
        for out in engine.step():
            if type(out) is not list:
                encoder.encode(out)
    rows = [g.sequences[0] for g in engine.output.groups.values()]
    assert all(seq.steady_delta is not None for seq in rows)
    engine.output.delta_encoder = DeltaEncoder()
    assert all(seq.steady_delta is None for seq in rows)
    llm.shutdown()
