"""The event loop only does I/O: while a prompt at the size limit is parsed and tokenized,
/health, /ready and /metrics still answer.

No clock is read: /metrics itself reports the requests being preprocessed, so a scrape
that shows one in progress, then /health and /ready answered, then another scrape still
showing it, proves the probes were served during that work. (With tokenization on the
event loop no scrape can ever see it in progress.)"""
from __future__ import annotations

import json
import shutil
import threading

import httpx
import pytest

from tests.runtime.server.conftest import ServerThread, metric_value

MAX_MODEL_LEN = 32768  # a long context: the largest allowed prompt is megabytes of text


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    model = tmp_path_factory.mktemp("long-context") / "model"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = MAX_MODEL_LEN
    (model / "config.json").write_text(json.dumps(config))
    with ServerThread(str(model), engine_fields=dict(
            max_model_len=MAX_MODEL_LEN, num_kv_blocks=MAX_MODEL_LEN // 16 + 1)) as srv:
        yield srv


def preprocessing(url: str) -> float:
    return metric_value(httpx.get(url + "/metrics", timeout=30).text,
                        "kubellm:num_requests_preprocessing")


def test_probes_answer_while_the_largest_prompt_is_tokenized(server):
    state = server.state
    num_chars = state.max_model_len * state.max_chars_per_token  # the most check_chars lets in
    prompt = ("lorem ipsum dolor sit amet " * (num_chars // 27 + 1))[:num_chars]
    body = json.dumps({"prompt": prompt, "max_tokens": 1}).encode()
    assert len(body) <= server.config.max_request_body_bytes
    for _attempt in range(3):  # each try takes seconds of tokenizing; one sighting is proof
        answer = []
        big = threading.Thread(target=lambda: answer.append(httpx.post(
            server.url + "/v1/completions", content=body, timeout=600,
            headers={"Content-Type": "application/json"})))
        big.start()
        proven = False
        while big.is_alive() and not proven:
            if preprocessing(server.url) >= 1:
                probes = [httpx.get(server.url + p, timeout=30).status_code
                          for p in ("/health", "/ready")]
                assert probes == [200, 200]
                proven = preprocessing(server.url) >= 1
        big.join()
        # tokenized in full, then refused: more tokens than the context holds
        assert answer[0].status_code == 400, answer[0].text
        assert answer[0].json()["error"]["code"] == "context_length_exceeded"
        if proven:
            return
    pytest.fail("no probe was answered while a prompt was being tokenized")
