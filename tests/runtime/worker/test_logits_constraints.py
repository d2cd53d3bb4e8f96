"""Per-request logits constraints in the sampler (logit_bias, allowed_token_ids, grammar
masks), and the promise to plain requests: while none of them is alive, the model
runner and the sampler never even look for constraints or prompt logprobs."""
from __future__ import annotations

import pytest
import torch

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.core.sampling_params import ParameterError
from kubellm.runtime.worker import logits_constraints, model_runner
from kubellm.runtime.worker.logits_constraints import LogitsConstraints
from kubellm.runtime.worker.sampler import Sampler, SamplingState

VOCAB = 64


def state(params: SamplingParams) -> SamplingState:
    constraints = LogitsConstraints.create(params, VOCAB, "cpu")
    return SamplingState.create(params, [1, 2, 3], constraints=constraints)


def test_bias_and_allowed_ids_shape_the_sample():
    torch.manual_seed(0)
    logits = torch.randn(3, VOCAB)
    states = [state(SamplingParams(temperature=0, logit_bias={7: 100.0})),
              state(SamplingParams(temperature=1.0, allowed_token_ids=[5, 9])),
              state(SamplingParams(temperature=0))]
    for _ in range(20):
        ids = Sampler({0}).sample(logits, states).result().token_ids
        assert ids[0] == 7 and ids[1] in (5, 9) and ids[2] == int(logits[2].argmax())
    # the raw logits are untouched: logprobs are reported from them
    assert logits.shape == (3, VOCAB)


def test_ids_outside_the_vocabulary_are_refused():
    with pytest.raises(ParameterError, match="logit_bias"):
        LogitsConstraints.create(SamplingParams(logit_bias={VOCAB: 1.0}), VOCAB, "cpu")
    with pytest.raises(ParameterError, match="allowed_token_ids"):
        LogitsConstraints.create(SamplingParams(allowed_token_ids=[VOCAB + 3]), VOCAB, "cpu")
    assert LogitsConstraints.create(SamplingParams(), VOCAB, "cpu") is None


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(tiny_model_dir, max_model_len=256, num_kv_blocks=64)


def test_plain_requests_never_touch_the_new_code(llm, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("plain requests must not reach this")
    calls = []
    original = Sampler.sample

    def sample(self, logits, states, constrained=None):
        calls.append(constrained)
        return original(self, logits, states, constrained)
    monkeypatch.setattr(logits_constraints.ConstraintApplier, "apply", forbidden)
    monkeypatch.setattr(model_runner, "compute_prompt_logprobs", forbidden)
    monkeypatch.setattr(Sampler, "sample", sample)
    plain = [SamplingParams(temperature=0, max_tokens=5),
             SamplingParams(temperature=0.8, top_p=0.9, seed=1, max_tokens=5, logprobs=2,
                            repetition_penalty=1.1)]
    llm.generate(["a b c", "d e f"], plain)
    assert calls and set(calls) == {False}   # the sampler was told not to look


def test_special_requests_are_counted_until_they_finish(llm):
    scheduler = llm.engine.scheduler
    special = SamplingParams(temperature=0, max_tokens=3, logit_bias={5: -100.0})
    llm.generate(["a", "b"], [special, SamplingParams(max_tokens=3)])
    assert scheduler.num_special == 0
    llm.engine.add_request("gone", "hello", SamplingParams(max_tokens=50, prompt_logprobs=1))
    assert scheduler.num_special == 1
    llm.engine.step()
    llm.engine.abort_request("gone")
    assert scheduler.num_special == 0
    while llm.engine.has_unfinished_requests():
        llm.engine.step()


def test_grammar_masks_agree_with_and_without_async_scheduling(llm, tiny_model_dir):
    """Run ahead, a step's mask must still see the token the step before it sampled."""
    spec = {"json": {"type": "object", "properties": {"k": {"type": "string",
                                                            "maxLength": 6}},
                     "required": ["k"], "additionalProperties": False}}
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=60, structured_outputs=spec)
              for s in range(3)] + [SamplingParams(temperature=1.0, seed=9, max_tokens=20)]
    prompts = ["a", "b", "c", "d"]
    waiting = LLM(tiny_model_dir, max_model_len=256, num_kv_blocks=64,
                  async_scheduling=False)
    want = [o.outputs[0].token_ids for o in waiting.generate(prompts, params)]
    assert llm.engine.run_ahead
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want
