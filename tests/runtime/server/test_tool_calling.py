"""Tool calling through the official openai client against a real server: tool_choice
none / auto / required / named, parallel_tool_calls, tool results and assistant tool
calls in the history, streamed tool-call deltas, and one parser per format on a model
whose chat template writes that format.

The server runs with ``--chat-template`` (a Hermes/Qwen template) and
``--enable-auto-tool-choice``, no ``--tool-call-parser``: the parser comes from the
template in use, so a request with the Llama 3 or Mistral template (``chat_template``)
is read with that family's parser. A tiny random model never decides to call a tool by
itself; for ``auto`` its output is steered into each family's format with a
``structured_outputs`` choice, and the parser must find the call in it."""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest

from kubellm.runtime.server.tool_choice import auto_tool_parser
from kubellm.runtime.server.tool_parsers import PARSERS, detect_parser, get_parser
from tests.runtime.server.conftest import SERVED_NAME, ServerThread

TEMPLATES = Path(__file__).parent / "chat_templates"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ARGS = {"city": "Paris", "unit": "celsius"}
# what each family's model writes for one call, and the template that makes it so
FORMATS = {
    "hermes": ("hermes.jinja", 'Let me look.\n<tool_call>\n{"name": "get_weather", '
               '"arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'),
    "llama3_json": ("llama3_json.jinja", '{"name": "get_weather", "parameters": '
                    '{"city": "Paris", "unit": "celsius"}}'),
    "mistral": ("mistral.jinja", '[TOOL_CALLS][{"name": "get_weather", "arguments": '
                '{"city": "Paris", "unit": "celsius"}}]'),
}


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with ServerThread(tiny_model_dir, dict(max_model_len=1024),
                      chat_template=str(TEMPLATES / "hermes.jinja"),
                      enable_auto_tool_choice=True) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def chat(client, **kwargs):
    return client.chat.completions.create(**{"model": SERVED_NAME, "messages": ASK,
                                             "tools": TOOLS, "max_tokens": 120, **kwargs})


def streamed_calls(chunks) -> tuple[dict, str, str | None]:
    """Tool calls reassembled from deltas as OpenAI clients do: {index: call}."""
    calls, content, finish = {}, "", None
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            finish = choice.finish_reason or finish
            for d in delta.tool_calls or []:
                call = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = d.id or call["id"]
                if d.function:
                    call["name"] += d.function.name or ""
                    call["arguments"] += d.function.arguments or ""
    return calls, content, finish


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_named_function_arguments_follow_its_schema(client, stream):
    named = {"type": "function", "function": {"name": "get_weather"}}
    if stream:
        calls, _, finish = streamed_calls(chat(client, tool_choice=named, stream=True,
                                               temperature=1.0, seed=3))
        (call,) = calls.values()
        name, arguments = call["name"], call["arguments"]
        assert call["id"]
    else:
        out = chat(client, tool_choice=named, temperature=1.0, seed=3)
        (call,) = out.choices[0].message.tool_calls
        name, arguments, finish = call.function.name, call.function.arguments, \
            out.choices[0].finish_reason
        assert call.id and call.type == "function"
    assert name == "get_weather"
    jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])
    assert finish == "stop"     # OpenAI: a forced named call ends with "stop"


@pytest.mark.parametrize("parallel", [True, False])
def test_required_calls_always_parse(client, parallel):
    for seed in range(3):
        out = chat(client, tool_choice="required", parallel_tool_calls=parallel,
                   temperature=1.0, seed=seed, max_tokens=200)
        choice = out.choices[0]
        if choice.finish_reason == "length":
            continue   # a random model may ramble inside a string until max_tokens
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls
        assert calls and (parallel or len(calls) == 1)
        for call in calls:
            tool = next(t for t in TOOLS if t["function"]["name"] == call.function.name)
            jsonschema.validate(json.loads(call.function.arguments),
                                tool["function"]["parameters"])
        return
    pytest.fail("no seed finished within max_tokens")


@pytest.mark.parametrize("family", sorted(FORMATS))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_auto_reads_each_family_format(client, family, stream):
    template, text = FORMATS[family]
    kwargs = dict(tool_choice="auto", temperature=0.0,
                  extra_body={"chat_template": (TEMPLATES / template).read_text(),
                              "structured_outputs": {"choice": [text]}})
    if stream:
        calls, content, finish = streamed_calls(chat(client, stream=True, **kwargs))
        (call,) = calls.values()
        name, arguments = call["name"], call["arguments"]
    else:
        out = chat(client, **kwargs)
        message, finish = out.choices[0].message, out.choices[0].finish_reason
        (call,) = message.tool_calls
        name, arguments, content = call.function.name, call.function.arguments, \
            message.content or ""
    assert name == "get_weather" and json.loads(arguments) == ARGS
    assert finish == "tool_calls"
    assert content.strip() == ("Let me look." if family == "hermes" else "")


def test_auto_without_a_call_is_plain_content(client):
    out = chat(client, tool_choice="auto", temperature=0.0,
               extra_body={"structured_outputs": {"choice": ["It is sunny."]}})
    assert out.choices[0].message.content == "It is sunny."
    assert not out.choices[0].message.tool_calls and out.choices[0].finish_reason == "stop"


def test_parallel_calls_false_keeps_the_first(client):
    two = ('<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>\n'
           '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", '
           '"unit": "celsius"}}\n</tool_call>')
    both = chat(client, tool_choice="auto", temperature=0.0,
                extra_body={"structured_outputs": {"choice": [two]}})
    assert [c.function.name for c in both.choices[0].message.tool_calls] == \
        ["get_time", "get_weather"]
    one = chat(client, tool_choice="auto", temperature=0.0, parallel_tool_calls=False,
               extra_body={"structured_outputs": {"choice": [two]}})
    assert [c.function.name for c in one.choices[0].message.tool_calls] == ["get_time"]


def test_tool_choice_none_never_parses(client):
    text = FORMATS["hermes"][1]
    out = chat(client, tool_choice="none", temperature=0.0,
               extra_body={"structured_outputs": {"choice": [text]}})
    assert out.choices[0].message.content == text and not out.choices[0].message.tool_calls


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_history_with_calls_and_results_renders(client, server, family):
    """The call the server returned goes back with its result, through each template:
    the model's next prompt holds both (Mistral's template checks the 9-character id)."""
    template, text = FORMATS[family]
    template_text = (TEMPLATES / template).read_text()
    first = chat(client, tool_choice="auto", temperature=0.0,
                 extra_body={"chat_template": template_text,
                             "structured_outputs": {"choice": [text]}})
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "22 degrees"}]
    second = client.chat.completions.create(
        model=SERVED_NAME, messages=history, tools=TOOLS, max_tokens=4, temperature=0.0,
        extra_body={"chat_template": template_text, "return_token_ids": True})
    rendered = httpx.post(server.url + "/detokenize", timeout=30, json={
        "tokens": second.model_extra["prompt_token_ids"]}).json()["prompt"]
    assert "22 degrees" in rendered and "get_weather" in rendered and "Paris" in rendered
    assert second.choices[0].finish_reason in ("stop", "length")


def test_parsers_on_text():
    hermes = get_parser("hermes")
    content, calls = hermes.extract('Sure.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}'
                                    '\n</tool_call>\n<tool_call>{"name": "b", "arguments": '
                                    '"{\\"y\\": 2}"}</tool_call>')
    assert content == "Sure." and [(c.name, json.loads(c.arguments)) for c in calls] == \
        [("a", {"x": 1}), ("b", {"y": 2})]
    assert hermes.extract("<tool_call>{not json</tool_call>") == \
        ("<tool_call>{not json</tool_call>", [])
    llama = get_parser("llama3_json")
    _, calls = llama.extract('<|python_tag|>{"name": "a", "parameters": {}}; '
                             '{"name": "b", "parameters": {"z": true}}')
    assert [c.name for c in calls] == ["a", "b"]
    assert llama.extract("The answer is {x}.") == ("The answer is {x}.", [])
    mistral = get_parser("mistral")
    _, calls = mistral.extract('[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"}')   # v11 format
    assert calls[0].name == "get_time" and len(calls[0].id) == 9
    # a stream holds back what could still open a call, and nothing before it
    assert hermes.streamable("Hello <tool_") == len("Hello ")
    assert llama.streamable("  ") == 0 and llama.streamable("Hi") == 2


def test_parser_comes_from_flag_or_template():
    assert detect_parser((TEMPLATES / "mistral.jinja").read_text()) == "mistral"
    assert detect_parser((TEMPLATES / "llama3_json.jinja").read_text()) == "llama3_json"
    assert detect_parser("{{ messages }}") is None
    flag = type("Config", (), {"enable_auto_tool_choice": True,
                               "tool_call_parser": "mistral"})()
    assert auto_tool_parser(None, flag, "<tool_call>").name == "mistral"
    assert set(PARSERS) == {"hermes", "llama3_json", "mistral"}
