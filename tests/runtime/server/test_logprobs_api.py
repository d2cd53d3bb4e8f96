"""Logprobs as OpenAI and vLLM return them, through the official openai client: the
sampled token always among completions' top_logprobs (up to N + 1), logprobs 0, echo with
max_tokens 0 (the prompt's logprobs: what loglikelihood evaluation reads), a batch of
token-id prompts shaped like lm-eval's, vLLM's prompt_logprobs on both routes, and
return_tokens_as_token_ids."""
from __future__ import annotations

import openai
import pytest

from kubellm.runtime import LLM, SamplingParams
from tests.runtime.server.conftest import ENGINE_FIELDS, SERVED_NAME

PROMPT = "The capital of France is Paris, and the capital of Italy is"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def offline(tiny_model_dir):
    return LLM(tiny_model_dir, **ENGINE_FIELDS)


def test_sampled_token_is_always_in_top_logprobs(client):
    out = client.completions.create(model=SERVED_NAME, prompt=PROMPT, max_tokens=16,
                                    temperature=1.5, seed=7, logprobs=2)
    lp = out.choices[0].logprobs
    outside = 0
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert top[token] == pytest.approx(logprob) and 2 <= len(top) <= 3
        outside += len(top) == 3 and logprob < min(v for k, v in top.items() if k != token)
    assert outside > 0   # a hot sample left the top 2: the N + 1 case happened


def test_logprobs_zero_is_the_sampled_token_alone(client):
    out = client.completions.create(model=SERVED_NAME, prompt=PROMPT, max_tokens=4,
                                    temperature=0, logprobs=0)
    lp = out.choices[0].logprobs
    assert [list(top) for top in lp.top_logprobs] == [[t] for t in lp.tokens]
    chat = client.chat.completions.create(model=SERVED_NAME, max_tokens=4, temperature=0,
                                          messages=[{"role": "user", "content": "Hi"}],
                                          logprobs=True, top_logprobs=0)
    assert all(e.top_logprobs == [] and e.logprob <= 0 for e in chat.choices[0].logprobs.content)


def test_echo_without_generation_scores_the_prompt(client, offline):
    ids = offline.get_tokenizer().encode(PROMPT)
    want = offline.generate([ids], SamplingParams(temperature=0, max_tokens=1,
                                                  prompt_logprobs=1))[0].prompt_logprobs
    out = client.completions.create(model=SERVED_NAME, prompt=PROMPT, max_tokens=0,
                                    echo=True, logprobs=1, temperature=0)
    choice = out.choices[0]
    assert choice.text == PROMPT and choice.finish_reason == "length"
    lp = choice.logprobs
    assert len(lp.tokens) == len(ids) and lp.token_logprobs[0] is None
    assert lp.top_logprobs[0] is None
    assert lp.token_logprobs[1:] == pytest.approx([w[t] for w, t in zip(want[1:], ids[1:])],
                                                  abs=1e-4)
    assert out.usage.prompt_tokens == len(ids) and out.usage.completion_tokens == 0


def test_loglikelihood_batch_as_lm_eval_sends_it(client, offline):
    """{"prompt": [[ids] x 4], "echo": true, "logprobs": 1, "max_tokens": 1}: one
    choice per prompt, by index, covering the prompt and the one generated token."""
    tok = offline.get_tokenizer()
    prompts = [tok.encode(f"Question {i}: is the sky blue? Answer: yes") for i in range(4)]
    out = client.completions.create(model=SERVED_NAME, prompt=prompts, echo=True,
                                    logprobs=1, max_tokens=1, temperature=0, seed=1234)
    assert sorted(c.index for c in out.choices) == [0, 1, 2, 3]
    for choice in out.choices:
        ids = prompts[choice.index]
        lp = choice.logprobs
        assert len(lp.token_logprobs) == len(ids) + 1 and lp.token_logprobs[0] is None
        assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:])
        assert choice.text.startswith(tok.decode(ids))
    assert out.usage.prompt_tokens == sum(len(p) for p in prompts)


def test_echo_streamed_starts_with_the_prompt(client):
    chunks = list(client.completions.create(model=SERVED_NAME, prompt=PROMPT, echo=True,
                                            max_tokens=5, temperature=0, logprobs=1,
                                            stream=True))
    text = "".join(c.choices[0].text for c in chunks)
    whole = client.completions.create(model=SERVED_NAME, prompt=PROMPT, echo=True,
                                      max_tokens=5, temperature=0, logprobs=1)
    assert chunks[0].choices[0].text.startswith(PROMPT) and text == whole.choices[0].text
    tokens = [t for c in chunks for t in c.choices[0].logprobs.tokens]
    assert tokens == whole.choices[0].logprobs.tokens


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_prompt_logprobs_field(client, route):
    extra = {"prompt_logprobs": 2, "return_token_ids": True}
    if route == "chat":
        out = client.chat.completions.create(
            model=SERVED_NAME, messages=[{"role": "user", "content": "Hi there"}],
            max_tokens=2, temperature=0, extra_body=extra)
        entries, prompt_ids = out.model_extra["prompt_logprobs"], \
            out.model_extra["prompt_token_ids"]
    else:
        out = client.completions.create(model=SERVED_NAME, prompt=PROMPT, max_tokens=2,
                                        temperature=0, extra_body=extra)
        choice = out.choices[0].model_extra
        entries, prompt_ids = choice["prompt_logprobs"], choice["prompt_token_ids"]
    assert len(entries) == len(prompt_ids) == out.usage.prompt_tokens
    assert entries[0] is None
    for entry, token in zip(entries[1:], prompt_ids[1:]):
        assert str(token) in entry and 2 <= len(entry) <= 3
        assert all(v["logprob"] <= 0 and isinstance(v["decoded_token"], str)
                   for v in entry.values())


def test_tokens_as_token_ids(client):
    out = client.completions.create(model=SERVED_NAME, prompt=PROMPT, max_tokens=3,
                                    temperature=0, logprobs=1,
                                    extra_body={"return_tokens_as_token_ids": True,
                                                "return_token_ids": True})
    choice = out.choices[0]
    assert choice.logprobs.tokens == [f"token_id:{t}" for t in choice.model_extra["token_ids"]]
