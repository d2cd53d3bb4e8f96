"""Async scheduling (the engine plans and launches step N+1 before step N's samples are
on the host) must change nothing a user sees: the same tokens, texts, logprobs and
finish reasons as the engine that waits for every step, through preemption, chunked
prefill, aborts, penalties and min_tokens (which make it wait), n > 1 and stop strings."""
from __future__ import annotations

import random

import pytest

from kubellm.runtime import LLM, SamplingParams

ENGINE = dict(num_kv_blocks=14, block_size=8, max_num_seqs=6, max_num_batched_tokens=40,
              max_model_len=256)


def _mix(rng: random.Random) -> list[tuple[list[int], SamplingParams]]:
    shared = [rng.randrange(100, 49000) for _ in range(20)]
    kinds = [
        dict(temperature=0.0, ignore_eos=True),
        dict(temperature=0.9, top_p=0.8, seed=7),
        dict(temperature=0.7, top_k=20, seed=3, n=2),
        dict(temperature=0.0, logprobs=3, ignore_eos=True),
        dict(temperature=0.0, repetition_penalty=2.0, presence_penalty=2.0, ignore_eos=True),
        dict(temperature=0.8, min_tokens=6, seed=11),
        dict(temperature=0.0, stop=[" the", "."]),
    ]
    requests = []
    for i in range(16):
        prompt = (shared if i % 4 == 0 else []) + [rng.randrange(100, 49000)
                                                   for _ in range(rng.randint(3, 40))]
        params = SamplingParams(max_tokens=rng.randint(1, 20), **kinds[i % len(kinds)])
        requests.append((prompt, params))
    return requests


def _run(model_dir, requests, run_ahead: bool, abort_at_step: int | None = None):
    llm = LLM(model_dir, async_scheduling=run_ahead, **ENGINE)
    engine = llm.engine
    assert engine.run_ahead is run_ahead
    late_rows = []
    launch = engine.executor.launch

    def counting_launch(out, tables, ahead_of=None):
        late = [s for s in out.scheduled if s.start == len(s.request.all_token_ids)]
        late_rows.append(len(late))
        # penalties and min_tokens read the host's token lists: never sampled while late
        assert not [s for s in late if s.request.params.min_tokens
                    or s.request.params.repetition_penalty != 1.0]
        return launch(out, tables, ahead_of)
    engine.executor.launch = counting_launch
    for i, (prompt, params) in enumerate(requests):
        engine.add_request(f"r{i}", prompt, params)
    finals, steps = {}, 0
    while engine.has_unfinished_requests():
        steps += 1
        assert steps < 3000, "the engine stopped making progress"
        for out in engine.step():
            if out.finished:
                finals[out.request_id] = out
        if steps == abort_at_step:
            engine.abort_request("r1")
            engine.abort_request("r5")
    engine.step()          # lands a step still in flight, if any
    assert engine.kv.num_free_blocks == engine.kv.num_blocks
    assert not engine.scheduler.running and not engine.scheduler.waiting
    return finals, engine, late_rows


def _summary(out):
    return [(c.token_ids, c.text, c.finish_reason, c.stop_reason,
             None if c.logprobs is None else [sorted(d) for d in c.logprobs])
            for c in out.outputs]


@pytest.fixture(scope="module")
def mix():
    return _mix(random.Random(5))


def test_run_ahead_gives_the_same_outputs_as_waiting(tiny_model_dir, mix):
    waited, sync_engine, sync_late = _run(tiny_model_dir, mix, run_ahead=False)
    ahead, engine, late = _run(tiny_model_dir, mix, run_ahead=True)
    assert set(ahead) == set(waited) == {f"r{i}" for i in range(len(mix))}
    for rid in waited:
        assert _summary(ahead[rid]) == _summary(waited[rid]), rid
        for a, w in zip(ahead[rid].outputs, waited[rid].outputs):
            if a.logprobs is not None:
                for da, dw in zip(a.logprobs, w.logprobs):
                    assert da == pytest.approx(dw, abs=1e-4)
    # the pool was small enough to preempt, and the engine really ran ahead: inputs of
    # later steps were read from the device while their tokens were still in flight
    assert engine.scheduler.num_preemptions > 0
    assert sum(late) > 0 and sum(sync_late) == 0


def test_abort_while_a_step_is_in_flight(tiny_model_dir, mix):
    greedy = [(p, s) for p, s in mix if s.temperature == 0.0 and s.logprobs is None
              and s.repetition_penalty == 1.0 and not s.stop]
    requests = [(p, s.clone(max_tokens=16)) for p, s in greedy] * 2
    waited, _, _ = _run(tiny_model_dir, requests, run_ahead=False, abort_at_step=4)
    ahead, _, _ = _run(tiny_model_dir, requests, run_ahead=True, abort_at_step=4)
    assert "r1" not in ahead and "r5" not in ahead
    assert set(ahead) == set(waited)
    for rid in waited:
        assert _summary(ahead[rid]) == _summary(waited[rid]), rid


def test_a_request_whose_late_token_is_its_last_is_not_scheduled_again(tiny_model_dir):
    llm = LLM(tiny_model_dir, max_model_len=128)
    engine = llm.engine
    engine.add_request("a", [101, 102, 103], SamplingParams(max_tokens=2, ignore_eos=True,
                                                            temperature=0.0))
    engine.step()                       # prefill, samples token 1
    engine.step()                       # decode of token 1 (late), samples token 2
    request = engine.scheduler.running[0]
    assert request.num_pending_tokens == 1 and request.num_output_tokens == 1
    outputs = engine.step()             # nothing new to launch: token 2 lands, done
    assert engine._in_flight is None
    assert outputs[0].finished and len(outputs[0].outputs[0].token_ids) == 2
