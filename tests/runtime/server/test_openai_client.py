"""The official openai client against a real server: texts equal offline LLM.generate."""
from __future__ import annotations

import json

import httpx
import openai
import pytest
import websockets.sync.client

from kubellm.runtime import LLM, SamplingParams
from tests.runtime.server.conftest import ENGINE_FIELDS, SERVED_NAME

PROMPT = "The capital of France is"
MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name a colour."}]
GREEDY = dict(temperature=0.0, max_tokens=12)
SEEDED = dict(temperature=0.9, top_p=0.9, seed=1234, max_tokens=12)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def offline(tiny_model_dir):
    return LLM(model=tiny_model_dir, **ENGINE_FIELDS)


def chat_prompt_ids(llm, messages):
    tok = llm.get_tokenizer()
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)


def offline_one(llm, prompt, **params):
    return llm.generate([prompt], SamplingParams(**params))[0]


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_completion_equals_offline(client, offline, params):
    want = offline_one(offline, PROMPT, **params)
    got = client.completions.create(model=SERVED_NAME, prompt=PROMPT, **params)
    assert got.choices[0].text == want.outputs[0].text
    assert got.choices[0].finish_reason == want.outputs[0].finish_reason
    assert got.usage.prompt_tokens == len(want.prompt_token_ids)
    assert got.usage.completion_tokens == len(want.outputs[0].token_ids)
    assert got.model == SERVED_NAME and got.object == "text_completion"


def test_completion_stream_equals_offline(client, offline):
    want = offline_one(offline, PROMPT, **SEEDED)
    chunks = list(client.completions.create(model=SERVED_NAME, prompt=PROMPT, stream=True,
                                            stream_options={"include_usage": True}, **SEEDED))
    text_chunks = [c for c in chunks if c.choices]
    assert len(text_chunks) > 1  # really streamed, not one blob
    assert "".join(c.choices[0].text for c in text_chunks) == want.outputs[0].text
    assert text_chunks[-1].choices[0].finish_reason == want.outputs[0].finish_reason
    assert all(c.choices[0].finish_reason is None for c in text_chunks[:-1])
    assert chunks[-1].usage.completion_tokens == len(want.outputs[0].token_ids)


def test_token_id_prompt(client, offline):
    ids = offline.get_tokenizer().encode(PROMPT)
    want = offline_one(offline, ids, **GREEDY)
    got = client.completions.create(model=SERVED_NAME, prompt=ids, **GREEDY)
    assert got.choices[0].text == want.outputs[0].text


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_chat_equals_offline(client, offline, params):
    want = offline_one(offline, chat_prompt_ids(offline, MESSAGES), **params)
    got = client.chat.completions.create(model=SERVED_NAME, messages=MESSAGES, **params)
    assert got.choices[0].message.role == "assistant"
    assert got.choices[0].message.content == want.outputs[0].text
    assert got.choices[0].finish_reason == want.outputs[0].finish_reason
    assert got.usage.prompt_tokens == len(want.prompt_token_ids)


def test_chat_stream_equals_offline(client, offline):
    want = offline_one(offline, chat_prompt_ids(offline, MESSAGES), **SEEDED)
    chunks = list(client.chat.completions.create(model=SERVED_NAME, messages=MESSAGES,
                                                 stream=True, **SEEDED))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want.outputs[0].text
    assert chunks[-1].choices[0].finish_reason == want.outputs[0].finish_reason


def test_n_samples_equal_offline(client, offline):
    params = dict(SEEDED, n=3)
    want = [o.text for o in offline_one(offline, PROMPT, **params).outputs]
    got = client.completions.create(model=SERVED_NAME, prompt=PROMPT, **params)
    assert [c.text for c in sorted(got.choices, key=lambda c: c.index)] == want
    assert len(set(want)) > 1  # the samples differ: n really sampled n times

    streamed = [""] * 3
    for chunk in client.chat.completions.create(model=SERVED_NAME, messages=MESSAGES,
                                                stream=True, **params):
        for choice in chunk.choices:
            streamed[choice.index] += choice.delta.content or ""
    chat_want = offline_one(offline, chat_prompt_ids(offline, MESSAGES), **params)
    assert streamed == [o.text for o in chat_want.outputs]


def test_completion_logprobs(client, offline):
    want = offline_one(offline, PROMPT, **GREEDY, logprobs=3).outputs[0]
    got = client.completions.create(model=SERVED_NAME, prompt=PROMPT, logprobs=3, **GREEDY)
    lp = got.choices[0].logprobs
    assert len(lp.tokens) == len(want.token_ids) == len(lp.token_logprobs)
    expected = [d[t] for d, t in zip(want.logprobs, want.token_ids)]
    assert lp.token_logprobs == pytest.approx(expected, abs=1e-4)
    for top, chosen in zip(lp.top_logprobs, lp.token_logprobs):
        assert 1 <= len(top) <= 3
        assert max(top.values()) == pytest.approx(chosen, abs=1e-4)  # greedy: the best one
    assert "".join(lp.tokens) == got.choices[0].text


def test_chat_logprobs_streamed(client):
    chunks = list(client.chat.completions.create(
        model=SERVED_NAME, messages=MESSAGES, stream=True, logprobs=True, top_logprobs=2,
        **GREEDY))
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs
               for e in c.choices[0].logprobs.content]
    assert len(entries) == GREEDY["max_tokens"]
    for entry in entries:
        assert len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob, abs=1e-4)


def test_models_and_probes(client, server):
    assert [m.id for m in client.models.list().data] == [SERVED_NAME]
    for path in ("/health", "/ready", "/version"):
        assert httpx.get(server.url + path).status_code == 200


def test_websocket_stream_equals_offline(server, offline):
    want = offline_one(offline, PROMPT, **SEEDED)
    url = server.url.replace("http://", "ws://") + "/v1/ws/completions"
    with websockets.sync.client.connect(url) as ws:
        for _ in range(2):  # one socket serves requests in turn
            ws.send(json.dumps({"prompt": PROMPT, **SEEDED}))
            text, reason = "", None
            while True:
                msg = json.loads(ws.recv(timeout=30))
                if msg.get("done"):
                    break
                text, reason = text + msg["text"], msg["finish_reason"] or reason
            assert text == want.outputs[0].text and reason == want.outputs[0].finish_reason
            assert msg["usage"]["completion_tokens"] == len(want.outputs[0].token_ids)
        ws.send(json.dumps({"prompt": PROMPT, "temperature": -1}))
        assert json.loads(ws.recv(timeout=30))["error"]["param"] == "temperature"


@pytest.mark.parametrize("n", [1, 2])
def test_stop_strings_end_like_offline(client, offline, server, n):
    """Detokenization and stop strings run in the API server, the engine core in another
    process: the text, finish reason and token count still equal the offline engine's,
    and the core stops generating (every KV block free again)."""
    params = dict(temperature=0.9, seed=7, max_tokens=40, n=n)
    full = offline_one(offline, PROMPT, **params).outputs[0].text
    stop = full[len(full) // 2:len(full) // 2 + 3]
    assert stop.strip(), full
    want = offline_one(offline, PROMPT, stop=[stop], **params)
    got = client.completions.create(model=SERVED_NAME, prompt=PROMPT, stop=[stop], **params)
    for choice, expected in zip(sorted(got.choices, key=lambda c: c.index), want.outputs):
        assert (choice.text, choice.finish_reason) == (expected.text, expected.finish_reason)
    assert want.outputs[0].finish_reason == "stop"
    assert got.usage.completion_tokens == sum(len(o.token_ids) for o in want.outputs)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=SERVED_NAME, prompt=PROMPT, stop=[stop], stream=True, **{**params, "n": 1})
        if c.choices)
    assert streamed == offline_one(offline, PROMPT, stop=[stop],
                                   **{**params, "n": 1}).outputs[0].text
    server.wait_idle()
