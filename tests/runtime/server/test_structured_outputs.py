"""Structured outputs through the official openai client against a real server: every
output of a randomized set of JSON schemas validates against its schema (jsonschema),
on both routes, whole and streamed; json_object, regex, choice and grammars (EBNF and
Lark) hold; and requests that ask for none of it, batched with those that do, produce
exactly what they produce alone."""
from __future__ import annotations

import json
import random
import re
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from kubellm.runtime import LLM, SamplingParams
from tests.runtime.server.conftest import ENGINE_FIELDS, SERVED_NAME, ServerThread

FIELDS = dict(ENGINE_FIELDS, max_model_len=1024)
MESSAGES = [{"role": "user", "content": "Describe a person as JSON."}]
EMAIL = r"[a-z]{1,8}@[a-z]{1,8}\.(com|org)"
# an arithmetic grammar, as EBNF (root rule "root") and as Lark (root rule "start")
EBNF = 'root ::= expr\nexpr ::= term ("+" term)*\nterm ::= [1-9] | "(" expr ")"'
LARK = 'start: expr\nexpr: term ("+" term)*\nterm: /[1-9]/ | "(" expr ")"'
ARITHMETIC = re.compile(r"[1-9()+]+")


def random_schema(rng: random.Random, depth: int = 0) -> dict:
    """An object schema with bounded members (so that a random model always finishes)."""
    kinds = ["string", "integer", "boolean", "enum", "array", "null"] + \
        (["object"] if depth < 2 else [])
    properties = {}
    for i in range(rng.randint(1, 4)):
        kind = rng.choice(kinds)
        if kind == "string":
            prop = {"type": "string", "maxLength": rng.randint(1, 10)}
        elif kind == "integer":
            low = rng.randint(-50, 50)
            prop = {"type": "integer", "minimum": low, "maximum": low + rng.randint(0, 999)}
        elif kind == "enum":
            prop = {"enum": rng.sample(["red", "green", "blue", 7, None, True], 3)}
        elif kind == "array":
            prop = {"type": "array", "items": {"type": "integer", "minimum": 0,
                                               "maximum": 9},
                    "minItems": 1, "maxItems": rng.randint(1, 3)}
        elif kind == "object":
            prop = random_schema(rng, depth + 1)
        else:
            prop = {"type": kind}
        properties[f"f{i}_{kind}"] = prop
    required = [k for k in properties if rng.random() < 0.8]
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with ServerThread(tiny_model_dir, FIELDS) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def complete(client, route: str, stream: bool, **kwargs) -> tuple[str, str]:
    """(text, finish_reason) over either route, whole or streamed."""
    common = {"model": SERVED_NAME, "temperature": 1.0, "max_tokens": 300, **kwargs}
    if route == "completions" and "response_format" in common:  # not in the client's
        common["extra_body"] = {"response_format": common.pop("response_format")}
    if route == "chat":
        if not stream:
            choice = client.chat.completions.create(messages=MESSAGES, **common).choices[0]
            return choice.message.content, choice.finish_reason
        chunks = list(client.chat.completions.create(messages=MESSAGES, stream=True,
                                                     **common))
        return ("".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                chunks[-1].choices[0].finish_reason)
    if not stream:
        choice = client.completions.create(prompt="JSON:", **common).choices[0]
        return choice.text, choice.finish_reason
    chunks = list(client.completions.create(prompt="JSON:", stream=True, **common))
    return "".join(c.choices[0].text for c in chunks), chunks[-1].choices[0].finish_reason


def test_random_json_schemas_always_validate(client):
    rng = random.Random(15)
    cases = []
    for i in range(16):
        schema = random_schema(rng)
        route = ("chat", "completions")[i % 2]
        stream = i % 4 >= 2
        if route == "chat" and i % 8 < 4:   # OpenAI's field
            extra = dict(response_format={"type": "json_schema", "json_schema": {
                "name": f"s{i}", "schema": schema, "strict": True}})
        else:                               # vLLM's field
            extra = dict(extra_body={"structured_outputs": {
                "json": schema, "disable_any_whitespace": i % 3 == 0}})
        cases.append((schema, route, stream, dict(seed=i, **extra)))
    with ThreadPoolExecutor(len(cases)) as pool:   # one batch: masks of mixed schemas
        results = list(pool.map(lambda c: complete(client, c[1], c[2], **c[3]), cases))
    finished = 0
    for (schema, *_), (text, reason) in zip(cases, results):
        if reason == "length":
            continue   # cut by max_tokens: a prefix of valid JSON, nothing to validate
        finished += 1
        assert reason == "stop"
        jsonschema.validate(json.loads(text), schema)
    assert finished >= len(cases) * 3 // 4


@pytest.mark.parametrize("route,stream", [("chat", False), ("completions", True)])
def test_json_object(client, route, stream):
    text, reason = complete(client, route, stream, seed=1,
                            response_format={"type": "json_object"})
    if reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:
        assert text.lstrip().startswith("{")


@pytest.mark.parametrize("spec,check", [
    ({"regex": EMAIL}, lambda t: re.fullmatch(EMAIL, t)),
    ({"choice": ["positive", "negative", "neutral"]},
     lambda t: t in ("positive", "negative", "neutral")),
    ({"grammar": EBNF}, ARITHMETIC.fullmatch),
    ({"grammar": LARK}, ARITHMETIC.fullmatch),
], ids=["regex", "choice", "ebnf", "lark"])
@pytest.mark.parametrize("route", ["chat", "completions"])
def test_regex_choice_grammar(client, route, spec, check):
    for seed in range(4):
        text, reason = complete(client, route, seed % 2 == 1, seed=seed, max_tokens=40,
                                extra_body={"structured_outputs": spec})
        if reason == "stop":
            assert check(text), text
        else:   # cut short: still a prefix the grammar allows
            assert reason == "length" and "\n" not in text


def test_guided_fields_of_older_vllm(client):
    text, _ = complete(client, "completions", False, seed=0,
                       extra_body={"guided_choice": ["yes", "no"]})
    assert text in ("yes", "no")


def test_unconstrained_requests_are_unaffected(client, tiny_model_dir):
    """Plain greedy requests batched with constrained ones give what they give alone."""
    plain = [f"Story {i}:" for i in range(4)]
    want = [o.outputs[0].text for o in LLM(tiny_model_dir, **FIELDS).generate(
        plain, SamplingParams(temperature=0.0, max_tokens=24))]

    def run(i):
        if i % 2:
            return complete(client, "completions", False, seed=i, max_tokens=60,
                            extra_body={"structured_outputs": {"regex": EMAIL}})
        return client.completions.create(model=SERVED_NAME, prompt=plain[i // 2],
                                         temperature=0.0, max_tokens=24).choices[0].text
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(run, range(8)))
    assert got[0::2] == want
    assert all(re.fullmatch(EMAIL, t) or r == "length" for t, r in got[1::2])
