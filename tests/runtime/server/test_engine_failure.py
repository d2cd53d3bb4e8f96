"""A step that raises fails the requests in flight (500 / an error event), not the loop:
the server keeps serving, and an add the engine refuses fails only its own request."""
from __future__ import annotations

import json
import threading

import httpx

BODY = {"prompt": "Hello", "max_tokens": 50, "ignore_eos": True, "temperature": 0}


def break_next_step(engine) -> threading.Event:
    """The engine's next step() raises once; the event is set when it has."""
    real_step, fired = engine.step, threading.Event()

    def step():
        if not fired.is_set():
            fired.set()
            raise RuntimeError("injected fault")
        return real_step()
    engine.step = step
    return fired


def test_failed_step_fails_in_flight_only(server):
    fired = break_next_step(server.engine)
    r = httpx.post(server.url + "/v1/completions", json=BODY, timeout=30)
    assert fired.is_set()
    assert r.status_code == 500
    assert "injected fault" in r.json()["error"]["message"]
    with httpx.stream("POST", server.url + "/v1/completions", json={**BODY, "stream": True},
                      timeout=30) as stream:
        fired = break_next_step(server.engine)
        events = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert fired.is_set()
    assert "injected fault" in json.loads(events[-1][6:])["error"]["message"]
    server.wait_idle()
    assert httpx.get(server.url + "/health").status_code == 200
    ok = httpx.post(server.url + "/v1/completions", json=BODY, timeout=30)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 50
    assert server.engine.kv.num_free_blocks == server.engine.kv.num_blocks


def test_add_refused_by_engine_fails_only_that_request(server, monkeypatch):
    real_add = server.engine.add_request

    def add(request_id, prompt, params, priority=0):
        if getattr(prompt, "text", prompt) == "refuse me":
            raise RuntimeError("no thanks")
        return real_add(request_id, prompt, params, priority)
    monkeypatch.setattr(server.engine, "add_request", add)
    bad = httpx.post(server.url + "/v1/completions", json={**BODY, "prompt": "refuse me"},
                     timeout=30)
    assert bad.status_code == 500 and bad.json()["error"]["type"] == "internal_server_error"
    assert httpx.post(server.url + "/v1/completions", json=BODY, timeout=30).status_code == 200
