"""Hermes / Qwen2.5 / Qwen3 tool calls: ``<tool_call>{"name": ..., "arguments": {...}}
</tool_call>``, one block per call, after optional plain content."""
from __future__ import annotations

import json
import re

from kubellm.runtime.server.tool_parsers.base import ParsedToolCall, ToolParser, arguments_text

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


class HermesToolParser(ToolParser):
    name = "hermes"
    markers = ("<tool_call>",)

    def _calls(self, text: str) -> list[ParsedToolCall]:
        calls = []
        for body in _BLOCK.findall(text):
            call = json.loads(body.strip())
            calls.append(ParsedToolCall(call["name"], arguments_text(call.get("arguments", {}))))
        return calls
