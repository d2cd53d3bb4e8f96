"""A step that raises in the engine core fails the requests in flight (500 / an error
event, then [DONE]), not the core: the server keeps serving, and an add the engine
refuses fails only its own request."""
from __future__ import annotations

import json

import httpx
import pytest

from tests.runtime.server.conftest import ServerThread
from tests.runtime.server.faulty_engine import FAIL_STEP_PROMPT, REFUSE_PROMPT

BODY = {"prompt": "Hello", "max_tokens": 50, "ignore_eos": True, "temperature": 0}


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with ServerThread(tiny_model_dir,
                      engine_factory="tests.runtime.server.faulty_engine:build") as srv:
        yield srv


def test_failed_step_fails_in_flight_only(server):
    r = httpx.post(server.url + "/v1/completions", json={**BODY, "prompt": FAIL_STEP_PROMPT},
                   timeout=30)
    assert r.status_code == 500
    assert "injected fault" in r.json()["error"]["message"]
    with httpx.stream("POST", server.url + "/v1/completions",
                      json={**BODY, "prompt": FAIL_STEP_PROMPT, "stream": True},
                      timeout=30) as stream:
        assert stream.status_code == 200
        events = [line[6:] for line in stream.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert "injected fault" in error["message"] and error["type"] == "internal_server_error"
    server.wait_idle()
    assert httpx.get(server.url + "/health").status_code == 200
    ok = httpx.post(server.url + "/v1/completions", json=BODY, timeout=30)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 50
    server.wait_idle()  # every KV block free again


def test_add_refused_by_engine_fails_only_that_request(server):
    bad = httpx.post(server.url + "/v1/completions", json={**BODY, "prompt": REFUSE_PROMPT},
                     timeout=30)
    assert bad.status_code == 500 and bad.json()["error"]["type"] == "internal_server_error"
    assert "no thanks" in bad.json()["error"]["message"]
    assert httpx.post(server.url + "/v1/completions", json=BODY, timeout=30).status_code == 200
