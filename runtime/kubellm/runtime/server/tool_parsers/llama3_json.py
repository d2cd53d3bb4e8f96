"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: the whole output is ``{"name": ...,
"parameters": {...}}`` (several separated by ``;``), optionally after
``<|python_tag|>``."""
from __future__ import annotations

from kubellm.runtime.server.tool_parsers.base import (ParsedToolCall, ToolParser,
                                                      arguments_text, decode_json_values)

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonToolParser(ToolParser):
    name = "llama3_json"
    markers = (PYTHON_TAG, "{")
    at_start = True

    def _calls(self, text: str) -> list[ParsedToolCall]:
        text = text.strip()
        if text.startswith(PYTHON_TAG):
            text = text[len(PYTHON_TAG):]
        calls = []
        for value in decode_json_values(text):
            arguments = value.get("parameters", value.get("arguments", {}))
            calls.append(ParsedToolCall(value["name"], arguments_text(arguments)))
        return calls
