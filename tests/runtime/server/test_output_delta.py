"""What the engine core sends back per step travels whole: the front end rebuilds every
field of a RequestOutput from the deltas, including issue 15's request-level list
(prompt_logprobs, which the engine extends in place), num_cached_tokens and the metrics
timestamps, through the real wire codec."""
from __future__ import annotations

from kubellm.runtime.core.outputs import CompletionOutput, PrefixView, RequestOutput
from kubellm.runtime.engine_core import wire
from kubellm.runtime.engine_core.output_delta import (DeltaEncoder, apply_completion_delta,
                                                      apply_request_delta)


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
    assert fast == general
    assert fast[1] == ["r", None, [[0, {"token_ids": [101]}, None]]]
