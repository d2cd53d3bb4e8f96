"""Bad requests get the right 4xx in OpenAI's error shape, never reach the engine, and
never take the server down — the cases a new user found answering 500 included."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.runtime.server.conftest import ServerThread

KEY = "sekret"
AUTH = {"Authorization": f"Bearer {KEY}"}
GOOD = {"prompt": "Hello", "max_tokens": 4, "temperature": 0}
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
LONG_TEXT = "word " * 400  # > max_model_len=256 tokens
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
DEEP = b"[" * 100_000 + b"]" * 100_000
HUGE_INT = b"9" * 5000


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with ServerThread(tiny_model_dir, api_key=KEY) as srv:
        yield srv


def completion(**changes):
    return ("/v1/completions", {**GOOD, **changes})


def chat(**changes):
    return ("/v1/chat/completions", {**CHAT, **changes})


def without(body, key):
    return {k: v for k, v in body.items() if k != key}


# (case id, path, body (dict, or raw bytes), headers, status, param)
CASES = [
    ("malformed-json", "/v1/completions", b'{"prompt": "hi",', AUTH, 400, None),
    ("body-not-object", "/v1/completions", b'["hi"]', AUTH, 400, None),
    ("missing-prompt", "/v1/completions", without(GOOD, "prompt"), AUTH, 400, "prompt"),
    ("prompt-wrong-type", *completion(prompt=123), AUTH, 400, "prompt"),
    ("prompt-empty", *completion(prompt=""), AUTH, 400, "prompt"),
    ("prompt-list-with-empty", *completion(prompt=["a", ""]), AUTH, 400, "prompt"),
    ("prompt-list-too-long", *completion(prompt=["a", LONG_TEXT]), AUTH, 400, "prompt"),
    ("token-id-out-of-vocab", *completion(prompt=[1, 10**9]), AUTH, 400, "prompt"),
    ("prompt-too-long", *completion(prompt=LONG_TEXT), AUTH, 400, "prompt"),
    ("max-tokens-negative", *completion(max_tokens=-1), AUTH, 400, "max_tokens"),
    ("max-tokens-huge", *completion(max_tokens=10**9), AUTH, 400, "max_tokens"),
    ("max-tokens-string", *completion(max_tokens="10"), AUTH, 400, "max_tokens"),
    ("temperature-negative", *completion(temperature=-0.5), AUTH, 400, "temperature"),
    ("top-p-above-1", *completion(top_p=1.5), AUTH, 400, "top_p"),
    ("top-k-negative", *completion(top_k=-5), AUTH, 400, "top_k"),
    ("min-p-above-1", *completion(min_p=2.0), AUTH, 400, "min_p"),
    ("presence-penalty", *completion(presence_penalty=5.0), AUTH, 400, "presence_penalty"),
    ("n-zero", *completion(n=0), AUTH, 400, "n"),
    ("too-many-stops", *completion(stop=[f"s{i}" for i in range(17)]), AUTH, 400, "stop"),
    ("stop-wrong-type", *completion(stop=5), AUTH, 400, "stop"),
    ("seed-float", *completion(seed=1.5), AUTH, 400, "seed"),
    ("stream-not-bool", *completion(stream="yes"), AUTH, 400, "stream"),
    ("logprobs-too-many", *completion(logprobs=100), AUTH, 400, "logprobs"),
    ("prompt-logprobs-too-many", *completion(prompt_logprobs=21), AUTH, 400,
     "prompt_logprobs"),
    ("max-tokens-0-without-echo", *completion(max_tokens=0), AUTH, 400, "max_tokens"),
    ("suffix", *completion(suffix="end"), AUTH, 400, "suffix"),
    ("beam-search", *completion(use_beam_search=True), AUTH, 400, "use_beam_search"),
    ("truncate-zero", *completion(truncate_prompt_tokens=0), AUTH, 400,
     "truncate_prompt_tokens"),
    ("logit-bias-value", *completion(logit_bias={"5": 200}), AUTH, 400, "logit_bias"),
    ("logit-bias-not-an-id", *completion(logit_bias={"five": 1}), AUTH, 400, "logit_bias"),
    ("logit-bias-outside-vocab", *completion(logit_bias={"999999": 1}), AUTH, 400,
     "logit_bias"),
    ("allowed-ids-empty", *completion(allowed_token_ids=[]), AUTH, 400,
     "allowed_token_ids"),
    ("allowed-ids-outside-vocab", *completion(allowed_token_ids=[10**7]), AUTH, 400,
     "allowed_token_ids"),
    ("stop-token-outside-vocab", *completion(stop_token_ids=[10**7]), AUTH, 400,
     "stop_token_ids"),
    ("regex-does-not-compile", *completion(structured_outputs={"regex": "(a"}), AUTH, 400,
     "structured_outputs"),
    # refused by the engine core: a stream starts only once the core took the request in
    ("regex-does-not-compile-streamed", *completion(structured_outputs={"regex": "(a"},
                                                    stream=True), AUTH, 400,
     "structured_outputs"),
    ("logit-bias-outside-vocab-streamed", *chat(logit_bias={"999999": 1}, stream=True), AUTH,
     400, "logit_bias"),
    ("grammar-does-not-compile", *completion(structured_outputs={"grammar": "root ::= x"}),
     AUTH, 400, "structured_outputs"),
    ("structured-two-kinds", *completion(structured_outputs={"regex": "a", "choice": ["b"]}),
     AUTH, 400, "structured_outputs"),
    ("structured-unknown-kind", *completion(structured_outputs={"xml": "a"}), AUTH, 400,
     "structured_outputs"),
    ("structured-and-response-format", *chat(response_format={"type": "json_object"},
                                             guided_regex="a"), AUTH, 400, "guided_regex"),
    ("response-format-type", *chat(response_format={"type": "xml"}), AUTH, 400,
     "response_format.type"),
    ("json-schema-missing", *chat(response_format={"type": "json_schema"}), AUTH, 400,
     "response_format.json_schema"),
    ("json-schema-not-object", *chat(response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}), AUTH, 400,
     "response_format.json_schema"),
    ("audio", *chat(audio={"voice": "alloy", "format": "wav"}), AUTH, 400, "audio"),
    ("modalities-audio", *chat(modalities=["text", "audio"]), AUTH, 400, "modalities"),
    ("store", *chat(store=True), AUTH, 400, "store"),
    ("service-tier", *chat(service_tier="flex"), AUTH, 400, "service_tier"),
    ("functions", *chat(functions=[{"name": "f"}]), AUTH, 400, "functions"),
    ("prediction", *chat(prediction={"type": "content", "content": "x"}), AUTH, 400,
     "prediction"),
    ("web-search", *chat(web_search_options={}), AUTH, 400, "web_search_options"),
    ("tools-auto-not-enabled", *chat(tools=[TOOL]), AUTH, 400, "tool_choice"),
    ("tool-choice-unknown-name", *chat(tools=[TOOL], tool_choice={
        "type": "function", "function": {"name": "nope"}}), AUTH, 400, "tool_choice"),
    ("tool-choice-without-tools", *chat(tool_choice="required"), AUTH, 400, "tool_choice"),
    ("tool-choice-with-schema", *chat(tools=[TOOL], tool_choice="required",
                                      response_format={"type": "json_object"}), AUTH, 400,
     "tool_choice"),
    ("tool-bad-name", *chat(tools=[{"type": "function", "function": {"name": "a b"}}],
                            tool_choice="none"), AUTH, 400, "tools[0].function.name"),
    ("tool-message-without-content-type", *chat(messages=[{"role": "tool", "content": 5}]),
     AUTH, 400, "messages[0].content"),
    ("continue-with-generation-prompt", *chat(continue_final_message=True), AUTH, 400,
     "continue_final_message"),
    ("continue-without-assistant", *chat(continue_final_message=True,
                                         add_generation_prompt=False), AUTH, 400,
     "continue_final_message"),
    ("template-kwargs-reserved", *chat(chat_template_kwargs={"tokenize": True}), AUTH, 400,
     "chat_template_kwargs"),
    ("template-does-not-render", *chat(chat_template="{{ raise_exception('no') }}"), AUTH,
     400, "messages"),
    ("tokenize-neither", "/tokenize", {}, AUTH, 400, "prompt"),
    ("detokenize-outside-vocab", "/detokenize", {"tokens": [10**9]}, AUTH, 400, "tokens"),
    ("unknown-model", *completion(model="gpt-17"), AUTH, 404, "model"),
    ("messages-empty", *chat(messages=[]), AUTH, 400, "messages"),
    ("messages-missing", "/v1/chat/completions", without(CHAT, "messages"), AUTH, 400,
     "messages"),
    ("bad-role", *chat(messages=[{"role": "wizard", "content": "hi"}]), AUTH, 400,
     "messages[0].role"),
    ("content-wrong-type", *chat(messages=[{"role": "user", "content": 5}]), AUTH, 400,
     "messages[0].content"),
    ("chat-too-long", *chat(messages=[{"role": "user", "content": LONG_TEXT}]), AUTH, 400,
     "messages"),
    ("top-logprobs-alone", *chat(top_logprobs=2), AUTH, 400, "top_logprobs"),
    ("chat-unknown-model", *chat(model="nope"), AUTH, 404, "model"),
    ("stream-options-without-stream", *completion(stream_options={"include_usage": True}),
     AUTH, 400, "stream_options"),
    # each of these answered 500 with two tracebacks, and closed the connection
    ("lone-surrogate-prompt", "/v1/completions", b'{"prompt": "\\ud800"}', AUTH, 400, None),
    ("lone-surrogate-chat", "/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": "a\\udfff"}]}', AUTH, 400, None),
    ("lone-surrogate-model", "/v1/completions", b'{"prompt": "hi", "model": "\\ud800"}',
     AUTH, 400, None),
    ("deep-json-ignored-field", "/v1/completions", b'{"prompt": "hi", "x": ' + DEEP + b"}",
     AUTH, 400, None),
    ("deep-json-prompt", "/v1/completions", b'{"prompt": ' + DEEP + b"}", AUTH, 400, None),
    ("moderately-deep-json", "/v1/completions",
     b'{"prompt": "hi", "x": ' + b"[" * 100 + b"]" * 100 + b"}", AUTH, 400, "x[0]" + "[0]" * 62),
    ("huge-int-seed", "/v1/completions", b'{"prompt": "hi", "seed": ' + HUGE_INT + b"}", AUTH,
     400, None),
    ("huge-int-ignored-field", "/v1/completions", b'{"prompt": "hi", "n2": ' + HUGE_INT + b"}",
     AUTH, 400, None),
    ("int-beyond-64-bits", "/v1/completions", b'{"prompt": "hi", "seed": 1' + b"0" * 20 + b"}",
     AUTH, 400, "seed"),
    ("prompt-token-id-past-vocab", *completion(prompt=[1, 2, 10**6]), AUTH, 400, "prompt"),
    ("prompt-token-id-negative", *completion(prompt=[[5, 6], [7, -1]]), AUTH, 400, "prompt"),
    ("nan", "/v1/completions", b'{"prompt": "hi", "temperature": NaN}', AUTH, 400, None),
    ("invalid-utf8", "/v1/completions", b'{"prompt": "\xff\xfe"}', AUTH, 400, None),
    ("chars-prove-too-long", *completion(prompt="x" * 2_000_000), AUTH, 400, "prompt"),
    ("completions-not-json", *completion(), {**AUTH, "Content-Type": "text/plain"}, 415,
     None),
    ("tokenize-not-json", "/tokenize", {"prompt": "hi"}, {**AUTH, "Content-Type": "text/plain"},
     415, None),
    ("tokenize-lone-surrogate", "/tokenize", b'{"prompt": "\\ud800"}', AUTH, 400, None),
    ("tokenize-deep-json", "/tokenize", b'{"prompt": "hi", "x": ' + DEEP + b"}", AUTH, 400,
     None),
    ("no-api-key", *completion(), {}, 401, None),
    ("wrong-api-key", *completion(), {"Authorization": "Bearer nope"}, 401, None),
    ("unknown-route", "/v1/engines", GOOD, AUTH, 404, None),
]


@pytest.fixture(scope="module")
def client(server):
    """One keep-alive connection for every case: a 4xx must leave it usable."""
    with httpx.Client(base_url=server.url, timeout=30,
                      limits=httpx.Limits(max_connections=1)) as c:
        yield c


def local_port(response: httpx.Response) -> int:
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


@pytest.mark.parametrize("name,path,body,headers,status,param", CASES,
                         ids=[c[0] for c in CASES])
def test_bad_input(server, client, name, path, body, headers, status, param):
    prompt_tokens_before = server.stats.prompt_tokens_total
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = client.post(path, headers={"Content-Type": "application/json", **headers}, **kwargs)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert error["message"] and isinstance(error["type"], str)
    if param is not None:
        assert param.split("[")[0].split(".")[0] in error["message"]
    # the bad request never reached the engine; the same connection answers a good one
    assert server.stats.prompt_tokens_total == prompt_tokens_before
    good = client.post("/v1/completions", json=GOOD, headers=AUTH)
    assert good.status_code == 200 and good.json()["choices"][0]["finish_reason"] == "length"
    assert local_port(good) == local_port(r), "the error closed the keep-alive connection"


def test_probes_need_no_key(server):
    for path in ("/health", "/ready", "/metrics", "/version"):
        assert httpx.get(server.url + path).status_code == 200
    assert httpx.get(server.url + "/v1/models").status_code == 401


def test_full_queue_answers_503(server):
    """Over max_queue waiting requests, new ones get 503 + Retry-After. The burst is
    streams that cannot finish while the test looks (max_tokens fills the context), and
    that it then drops: nothing here waits on the machine's speed."""
    long_body = {**GOOD, "max_tokens": 240, "ignore_eos": True, "stream": True}
    stop, started = threading.Event(), []

    def hold_a_stream():
        with httpx.stream("POST", server.url + "/v1/completions", json=long_body,
                          headers=AUTH, timeout=120) as r:
            started.append(r.status_code)
            for _ in r.iter_lines():
                if stop.is_set():
                    return  # leaving closes the connection: the request is aborted
    # max_num_seqs=32 run; the rest of the burst waits
    threads = [threading.Thread(target=hold_a_stream) for _ in range(32 + 12)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        # every stream of the burst answered (a late one would meet the lowered bound
        # and get the 503 itself: seen once in a clean-clone run) and 8 of them wait in
        # the engine's own queue
        while len(started) < len(threads) or server.stats.num_waiting < 8:
            assert time.monotonic() < deadline, "the burst never queued"
            time.sleep(0.005)
        server.state.config.max_queue = 8
        r = httpx.post(server.url + "/v1/completions", json=GOOD, headers=AUTH, timeout=30)
        assert r.status_code == 503, r.text
        assert r.headers["Retry-After"].isdigit()
        assert r.json()["error"]["code"] == "service_unavailable"
    finally:
        server.state.config.max_queue = 1024
        stop.set()
        for t in threads:
            t.join(120)
    assert started == [200] * len(threads)
    server.wait_idle(60)
    assert httpx.post(server.url + "/v1/completions", json=GOOD, headers=AUTH,
                      timeout=30).status_code == 200
