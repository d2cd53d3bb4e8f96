"""Batches, token ids and chat-template controls through the official openai client: a
list of prompts with n per prompt (OpenAI's choice indexes), logit_bias,
allowed_token_ids, return_token_ids, truncate_prompt_tokens, include_stop_str_in_output,
/tokenize and /detokenize, cached tokens, continuous usage stats, chat_template_kwargs,
continue_final_message, chat echo, and unknown fields accepted but logged once."""
from __future__ import annotations

import logging

import httpx
import openai
import pytest

from kubellm.runtime import LLM, SamplingParams
from tests.runtime.server.conftest import ENGINE_FIELDS, SERVED_NAME

SEEDED = dict(temperature=0.9, seed=11, max_tokens=8)
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def offline(tiny_model_dir):
    return LLM(tiny_model_dir, **ENGINE_FIELDS)


@pytest.mark.parametrize("as_ids", [False, True], ids=["texts", "token-ids"])
def test_prompt_list_with_n(client, offline, as_ids):
    prompts = ["First prompt", "A second one", "Third"]
    if as_ids:
        prompts = [offline.get_tokenizer().encode(p) for p in prompts]
    want = offline.generate(prompts, SamplingParams(n=2, **SEEDED))
    out = client.completions.create(model=SERVED_NAME, prompt=prompts, n=2, **SEEDED)
    got = {c.index: c.text for c in out.choices}
    assert got == {i * 2 + j: want[i].outputs[j].text for i in range(3) for j in range(2)}
    assert out.usage.prompt_tokens == sum(len(w.prompt_token_ids) for w in want)
    streamed = {}
    for chunk in client.completions.create(model=SERVED_NAME, prompt=prompts, n=2,
                                           stream=True, **SEEDED):
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
    assert streamed == got


def test_logit_bias_and_allowed_token_ids(client):
    greedy = dict(model=SERVED_NAME, prompt="The capital of France is", max_tokens=4,
                  temperature=0, extra_body={"return_token_ids": True})
    first = client.completions.create(**greedy).choices[0].model_extra["token_ids"][0]
    banned = client.completions.create(**greedy, logit_bias={str(first): -100})
    assert first not in banned.choices[0].model_extra["token_ids"]
    forced = client.completions.create(**greedy, logit_bias={"42": 100})
    assert forced.choices[0].model_extra["token_ids"] == [42] * 4
    allowed = client.completions.create(
        model=SERVED_NAME, prompt="x", max_tokens=12, temperature=1.0, seed=3,
        extra_body={"allowed_token_ids": [100, 200, 300], "return_token_ids": True})
    assert set(allowed.choices[0].model_extra["token_ids"]) <= {100, 200, 300}


def test_token_ids_truncation_and_stop_string(client, offline):
    tok = offline.get_tokenizer()
    ids = tok.encode("one two three four five six seven eight")
    out = client.completions.create(model=SERVED_NAME, prompt=ids, max_tokens=3,
                                    temperature=0,
                                    extra_body={"truncate_prompt_tokens": 4,
                                                "return_token_ids": True})
    assert out.usage.prompt_tokens == 4
    assert out.choices[0].model_extra["prompt_token_ids"] == ids[-4:]
    full = client.completions.create(model=SERVED_NAME, prompt="Hello", max_tokens=10,
                                     temperature=0, extra_body={"ignore_eos": True}).choices[0]
    stop = full.text[3:6]
    if not stop.strip():
        pytest.skip(reason=f"no usable stop string in {full.text!r}")
    kept = client.completions.create(model=SERVED_NAME, prompt="Hello", max_tokens=10,
                                     temperature=0, stop=[stop],
                                     extra_body={"include_stop_str_in_output": True})
    assert kept.choices[0].text == full.text[:full.text.index(stop) + len(stop)]


def test_tokenize_and_detokenize(server, offline):
    tok = offline.get_tokenizer()
    r = httpx.post(server.url + "/tokenize", json={"prompt": "Hello world",
                                                   "return_token_strs": True}).json()
    assert r["tokens"] == tok.encode("Hello world") and r["count"] == len(r["tokens"])
    assert r["max_model_len"] == ENGINE_FIELDS["max_model_len"] and len(r["token_strs"]) \
        == r["count"]
    back = httpx.post(server.url + "/detokenize", json={"tokens": r["tokens"]}).json()
    assert back["prompt"] == "Hello world"
    chat = httpx.post(server.url + "/tokenize", json={"messages": HI}).json()
    rendered = tok.apply_chat_template(HI, tokenize=False, add_generation_prompt=True)
    assert chat["tokens"] == tok.encode(rendered, add_special_tokens=False)
    info = httpx.get(server.url + "/tokenizer_info").json()
    assert info["eos_token"] == tok.eos_token and info["chat_template"]


def test_cached_tokens_and_continuous_usage(client):
    prompt = "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3
    client.completions.create(model=SERVED_NAME, prompt=prompt, max_tokens=1)
    again = client.completions.create(model=SERVED_NAME, prompt=prompt, max_tokens=1)
    assert again.usage.prompt_tokens_details.cached_tokens >= 16
    chunks = list(client.completions.create(
        model=SERVED_NAME, prompt="Hello", max_tokens=5, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        extra_body={"ignore_eos": True}))
    counts = [c.usage.completion_tokens for c in chunks[:-1]]
    assert counts == sorted(counts) and counts[-1] == 5 and chunks[-1].choices == []


def test_chat_template_controls(client, offline):
    tok = offline.get_tokenizer()
    template = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                "{% if add_generation_prompt %}assistant ({{ mood }}):{% endif %}")
    out = client.chat.completions.create(
        model=SERVED_NAME, messages=HI, max_tokens=1,
        extra_body={"chat_template": template, "chat_template_kwargs": {"mood": "glad"},
                    "return_token_ids": True})
    assert tok.decode(out.model_extra["prompt_token_ids"]) == \
        "user: Hi\nassistant (glad):"
    partial = HI + [{"role": "assistant", "content": "Hello, I am"}]
    cont = client.chat.completions.create(
        model=SERVED_NAME, messages=partial, max_tokens=3, temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False,
                    "echo": True, "return_token_ids": True})
    prompt_text = tok.decode(cont.model_extra["prompt_token_ids"])
    assert prompt_text.endswith("Hello, I am")          # no end-of-turn after it
    assert cont.choices[0].message.content.startswith("Hello, I am")
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=SERVED_NAME, messages=partial, max_tokens=3, temperature=0, stream=True,
        extra_body={"continue_final_message": True, "add_generation_prompt": False,
                    "echo": True}))
    assert streamed == cont.choices[0].message.content


def test_unknown_fields_are_accepted_and_logged_once(client, caplog):
    with caplog.at_level(logging.WARNING, logger="kubellm.server"):
        for _ in range(2):
            out = client.completions.create(model=SERVED_NAME, prompt="Hi", max_tokens=1,
                                            extra_body={"frobnicate_level": 3})
            assert out.choices[0].finish_reason in ("stop", "length")
    assert sum("frobnicate_level" in r.getMessage() for r in caplog.records) == 1


def test_generation_config_defaults_fill_unset_fields():
    from kubellm.runtime.server.protocol import parse_body
    from kubellm.runtime.server.protocol_chat import ChatCompletionRequest
    defaults = {"temperature": 0.3, "top_k": 7, "max_tokens": 9}
    body = parse_body(b'{"messages": [{"role": "user", "content": "x"}], "top_k": 2}',
                      ChatCompletionRequest)
    params = body.to_sampling_params(defaults, max_logprobs=20)
    assert (params.temperature, params.top_k, params.max_tokens) == (0.3, 2, 9)
