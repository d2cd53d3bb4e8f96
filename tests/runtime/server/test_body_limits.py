"""--max-request-body-bytes: a body announced larger is refused with 413 before a byte of
it is read; one streamed without a length is cut off with 413 as soon as it passes the
limit; the error names the flag. (10 MB prompts used to keep /health from answering for
28 s, and 100 MB bodies were accepted.)"""
from __future__ import annotations

import json
import socket

import httpx
import pytest

from tests.runtime.server.conftest import ServerThread

LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with ServerThread(tiny_model_dir, max_request_body_bytes=LIMIT) as srv:
        yield srv


def test_announced_oversize_body_is_refused_before_it_is_sent(server):
    with socket.create_connection(("127.0.0.1", server.config.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\n"
                     b"Content-Length: 104857600\r\n\r\n")  # 100 MB promised, none sent
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), reply[:300]
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "request_too_large" and "--max-request-body-bytes" in \
        error["message"]


def test_streamed_oversize_body_is_cut_off(server):
    def chunks():
        yield b'{"prompt": "'
        for _ in range(2 * LIMIT // 1024):
            yield b"x" * 1024
        yield b'"}'
    r = httpx.post(server.url + "/v1/completions", content=chunks(), timeout=60,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "request_too_large"


def test_body_within_the_limit_is_served(server):
    prompt = "word " * 40
    r = httpx.post(server.url + "/v1/completions", timeout=60,
                   json={"prompt": prompt, "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert httpx.get(server.url + "/health").status_code == 200
