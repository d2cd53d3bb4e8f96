"""What the engine core sends back per step travels whole: the front end rebuilds every
field of a RequestOutput from the deltas, including issue 15's request-level list
(prompt_logprobs, which the engine extends in place), num_cached_tokens and the metrics
timestamps, through the real wire codec."""
from __future__ import annotations

from kubellm.runtime.core.outputs import CompletionOutput, PrefixView, RequestOutput
from kubellm.runtime.engine_core import wire
from kubellm.runtime.engine_core.output_delta import (DeltaEncoder, apply_completion_delta,
                                                      apply_request_delta, expand)


def _through_wire(delta):
    codec = wire.Codec()
    return codec.decode(codec.encode([wire.OUTPUTS, [delta], [], [], {}]))[1][0]


def test_request_level_lists_grown_in_place_arrive_whole():
    prompt_logprobs = [None, {5: -1.0, 7: -2.0}]        # the engine's own list
    token_ids, logprobs = [3], [{3: -0.5}]
    out = RequestOutput("r", None, [1, 5, 9, 4], [
        CompletionOutput(0, token_ids=token_ids, logprobs=logprobs)],
        num_cached_tokens=2, prompt_logprobs=prompt_logprobs,
        metrics={"arrival_time": 1.0, "first_token_time": None})
    encoder = DeltaEncoder()
    rebuilt = RequestOutput("r", None, [1, 5, 9, 4], [CompletionOutput(0, token_ids=[],
                                                                       logprobs=[])])

    def step():
        delta = _through_wire(encoder.encode(out))
        apply_request_delta(rebuilt, delta)
        for index, appends, sets in delta[2]:
            apply_completion_delta(rebuilt.outputs[index], appends, sets)

    step()
    # a later prefill chunk extends the same list object; a token and a timestamp come
    prompt_logprobs.extend([{9: -0.1}, {4: -3.0, 2: -0.2}])
    token_ids.append(8)
    logprobs.append({8: -0.25})
    out.metrics = {"arrival_time": 1.0, "first_token_time": 2.0}
    step()
    step()  # nothing changed: nothing applied twice
    assert rebuilt.prompt_logprobs == [None, {5: -1.0, 7: -2.0}, {9: -0.1},
                                       {4: -3.0, 2: -0.2}]
    assert rebuilt.num_cached_tokens == 2
    assert rebuilt.metrics == {"arrival_time": 1.0, "first_token_time": 2.0}
    assert list(rebuilt.outputs[0].token_ids) == [3, 8]
    assert list(rebuilt.outputs[0].logprobs) == [{3: -0.5}, {8: -0.25}]


def test_a_request_without_prompt_logprobs_sends_no_list():
    out = RequestOutput("r", None, [1], [CompletionOutput(0, token_ids=[2])])
    delta = DeltaEncoder().encode(out)
    assert len(delta) == 3 and delta[1]["prompt_logprobs"] is None


def _plain_outputs():
    """A plain request's outputs step by step, with the changes that must leave the
    decode-step short path: a metrics timestamp, cached tokens, a finish. Steps share
    one metrics dict until it changes, as the output processor's do; step 4 has an
    equal copy of it."""
    ids: list[int] = []
    metrics = {"arrival_time": 1.0, "first_token_time": None}
    outs = []
    for step in range(6):
        ids.append(100 + step)
        if step == 2:
            metrics = {**metrics, "first_token_time": 2.0}
        if step == 4:
            metrics = dict(metrics)
        finished = step == 5
        outs.append(RequestOutput("r", None, [1, 2], [CompletionOutput(
            0, token_ids=list(ids) if finished else PrefixView(ids, len(ids)),
            finish_reason="length" if finished else None)], finished=finished,
            num_cached_tokens=16 if step >= 3 else 0, metrics=metrics))
    outs.insert(2, outs[1])   # a step that added no token
    return outs


def test_the_decode_step_short_path_sends_what_the_general_path_sends(monkeypatch):
    from kubellm.runtime.engine_core import output_delta
    assert output_delta._SHORT_PATH   # the classes still have the fields it knows
    encoder = DeltaEncoder()
    fast = [encoder.encode(o) for o in _plain_outputs()]
    monkeypatch.setattr(output_delta, "_SHORT_PATH", False)
    encoder = DeltaEncoder()
    general = [encoder.encode(o) for o in _plain_outputs()]
    assert [expand(d) for d in fast] == general
    assert fast[1] == ["r", [101]]                     # the compact form
    assert expand(fast[1]) == ["r", None, [[0, {"token_ids": [101]}, None]]]


def _timeless(delta: list) -> list:
    """A delta with its metrics' timestamps blanked (two engines' clocks differ)."""
    sets = delta[1]
    if sets and "metrics" in sets:
        sets = {**sets, "metrics": {k: type(v).__name__ for k, v in sets["metrics"].items()}}
    return [delta[0], sets, *delta[2:]]


def _delta_streams(tiny_model_dir, rows_as_deltas: bool) -> tuple[list[list], int]:
    """Per step, the deltas the engine core would send for a mix of requests on a real
    tiny Llama: plain ones (the hot row), one with logprobs, one with prompt logprobs,
    one of n=2, one stopped by a stop token id, one aborted midway; one finished by
    max_tokens after another was admitted."""
    from kubellm.runtime import LLM, SamplingParams
    llm = LLM(tiny_model_dir, dtype="float32", block_size=16, max_num_batched_tokens=64)
    engine = llm.engine
    encoder = DeltaEncoder()
    if rows_as_deltas:
        engine.output.delta_encoder = encoder
    # the front ends detokenize (the core's requests carry detokenize=False); one
    # request here keeps its text, to take the general path
    greedy = dict(temperature=0, ignore_eos=True, detokenize=False)
    requests = {
        "text": ([26, 27], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)),
        "plain-a": ([5, 6, 7], SamplingParams(max_tokens=9, **greedy)),
        "plain-b": (list(range(20, 60)), SamplingParams(max_tokens=12, **greedy)),
        "logprobs": ([8, 9], SamplingParams(max_tokens=6, logprobs=2, **greedy)),
        "prompt-lp": ([11, 12, 13, 14], SamplingParams(max_tokens=5, prompt_logprobs=1,
                                                        **greedy)),
        "n2": ([15, 16], SamplingParams(max_tokens=5, n=2, temperature=0.8, seed=3,
                                        detokenize=False)),
        "aborted": ([17, 18, 19], SamplingParams(max_tokens=30, **greedy)),
    }
    for rid, (prompt, params) in requests.items():
        engine.add_request(rid, prompt, params)
    steps, direct = [], 0
    for step in range(40):
        if step == 3:
            engine.add_request("late", [21, 22, 23, 24, 25],
                               SamplingParams(max_tokens=7, **greedy))
        if step == 5:
            engine.abort_request("aborted")
        if not engine.has_unfinished_requests():
            break
        outputs = engine.step()
        direct += sum(type(o) is list for o in outputs)
        steps.append([_timeless(o if type(o) is list else encoder.encode(o))
                      for o in outputs])
    llm.shutdown()
    return steps, direct


def test_hot_rows_as_deltas_send_what_encoding_their_outputs_sends(tiny_model_dir):
    """The output processor's hot row handed a DeltaEncoder (as the engine core sets it
    up) gives, step by step, the very deltas that building each RequestOutput and
    encoding it gives, and most running rows take that path."""
    built, none = _delta_streams(tiny_model_dir, rows_as_deltas=False)
    given, direct = _delta_streams(tiny_model_dir, rows_as_deltas=True)
    assert given == built
    assert none == 0 and len(built) > 8
    assert direct > sum(map(len, built)) // 3, (direct, sum(map(len, built)))


def test_the_front_end_reads_the_compact_delta_as_its_full_form():
    """RequestAssembler folds ``[request_id, token ids]`` in as the general delta it
    stands for, through the wire codec: the same cumulative output, step by step."""
    from kubellm.runtime import SamplingParams
    from kubellm.runtime.engine_core.assembler import RequestAssembler
    params = SamplingParams(max_tokens=8, detokenize=False)
    compact = RequestAssembler("r", None, [1, 2], params, tokenizer=None)
    full = RequestAssembler("r", None, [1, 2], params, tokenizer=None)
    first = ["r", {"finished": False, "num_cached_tokens": 0, "prompt_logprobs": None,
                   "metrics": {"arrival_time": 1.0}},
             [[0, {"token_ids": [7]}, {"finish_reason": None, "stop_reason": None,
                                       "logprobs": None}]]]
    compact.apply(_through_wire(first))
    full.apply(_through_wire(first))
    for tail in ([8], [], [9, 10]):
        got, stopped = compact.apply(_through_wire(["r", tail]))
        want, _ = full.apply(_through_wire(expand(["r", tail])))
        assert got == want and not stopped
    assert list(got.outputs[0].token_ids) == [7, 8, 9, 10] and not got.finished
