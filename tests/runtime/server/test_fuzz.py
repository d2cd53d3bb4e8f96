"""No 5xx for any body: schemathesis generates requests from the server's own OpenAPI
document — bodies that fit the schema and bodies that break it (wrong types, missing
fields, bytes that are not JSON) — and sends them over one keep-alive connection.
Every answer is below 500 with an OpenAI-shaped error body when it is one, the
connection survives every 4xx (413 excepted: it says Connection: close), and afterwards
the server is healthy with every KV block free."""
from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from tests.runtime.server.conftest import ServerThread

MAX_EXAMPLES = 30  # per operation and mode; every valid one runs a (short) generation


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    # a short context keeps the generations the fuzzer's valid bodies ask for short
    with ServerThread(tiny_model_dir, engine_fields=dict(max_model_len=64)) as srv:
        yield srv


def local_port(response: httpx.Response) -> int:
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                         ids=["fits-schema", "breaks-schema"])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize",
                                  "/detokenize"])
def test_generated_bodies_never_get_5xx(server, path, mode):
    schema = schemathesis.openapi.from_dict(server.app.openapi())
    operation = schema[path]["POST"]
    statuses = []
    with httpx.Client(base_url=server.url, timeout=120,
                      limits=httpx.Limits(max_connections=1)) as client:
        last_port = [None]

        @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                  derandomize=True, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def send(case):
            kwargs = ({"content": case.body} if isinstance(case.body, bytes)
                      else {"json": case.body})
            r = client.post(path, headers={"Content-Type": "application/json"}, **kwargs)
            statuses.append(r.status_code)
            assert r.status_code < 500, (case.body, r.text)
            if r.status_code >= 400:
                assert set(r.json()["error"]) == {"message", "type", "param", "code"}
            port = local_port(r)
            assert last_port[0] in (None, port), "the connection was closed after an answer"
            last_port[0] = None if r.headers.get("connection") == "close" else port
        send()
    assert statuses, "nothing was sent"
    server.wait_idle(120)  # every KV block free, nothing running or waiting
    assert httpx.get(server.url + "/health").status_code == 200
