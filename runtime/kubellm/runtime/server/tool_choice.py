"""tool_choice ``required`` and a named function, enforced with the grammar engine (as
vLLM does): the output is JSON that always parses — the named function's arguments, or a
list of ``{"name", "parameters"}`` calls — whatever the model's own tool-call format.
``auto`` leaves the model free and reads its format with a tool parser instead."""
from __future__ import annotations

import json

from kubellm.runtime.core.structured_outputs import StructuredOutputsParams
from kubellm.runtime.server.errors import bad_request
from kubellm.runtime.server.protocol_chat import ChatCompletionRequest
from kubellm.runtime.server.tool_parsers import ParsedToolCall, detect_parser, get_parser
from kubellm.runtime.server.tool_parsers.base import arguments_text

_ANY_OBJECT = {"type": "object"}


def _parameters(function) -> dict:
    return function.parameters or _ANY_OBJECT


def forced_structured_outputs(body: ChatCompletionRequest, mode: str
                              ) -> StructuredOutputsParams | None:
    """The schema that makes the output a valid call, for ``named`` and ``required``."""
    if mode == "named":
        name = body.tool_choice.function.name
        function = next(t.function for t in body.tools if t.function.name == name)
        return StructuredOutputsParams(json=_parameters(function), param="tool_choice")
    if mode == "required":
        calls = {"anyOf": [{"type": "object",
                            "properties": {"name": {"type": "string",
                                                    "enum": [t.function.name]},
                                           "parameters": _parameters(t.function)},
                            "required": ["name", "parameters"],
                            "additionalProperties": False} for t in body.tools]}
        schema = {"type": "array", "minItems": 1, "items": calls}
        if not body.parallel_tool_calls:
            schema["maxItems"] = 1
        return StructuredOutputsParams(json=schema, param="tool_choice")
    return None


def forced_calls(body: ChatCompletionRequest, mode: str, text: str
                 ) -> list[ParsedToolCall] | None:
    """The calls a forced output holds; None if it does not parse (cut by max_tokens)."""
    if mode == "named":
        return [ParsedToolCall(body.tool_choice.function.name, text)]
    try:
        items = json.loads(text)
        return [ParsedToolCall(item["name"], arguments_text(item.get("parameters", {})))
                for item in items]
    except (json.JSONDecodeError, TypeError, KeyError):
        return None


def auto_tool_parser(body: ChatCompletionRequest, config, template: str | None):
    """The parser for tool_choice auto: ``--tool-call-parser``, or the format the chat
    template in use writes tool calls in. vLLM's rule: auto needs
    ``--enable-auto-tool-choice``."""
    if not config.enable_auto_tool_choice:
        raise bad_request("tool_choice 'auto' (the default when tools are given) needs the "
                          "server started with --enable-auto-tool-choice; or send "
                          "tool_choice 'required', 'none' or a named function",
                          param="tool_choice")
    name = config.tool_call_parser or detect_parser(template)
    if name is None:
        raise bad_request("no tool-call parser: the chat template shows no known tool-call "
                          "format; start the server with --tool-call-parser",
                          param="tool_choice")
    return get_parser(name)
