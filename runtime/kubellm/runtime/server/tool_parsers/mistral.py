"""Mistral tool calls: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (v3 and
v7 tokenizers) or ``[TOOL_CALLS]name[ARGS]{...}`` per call (v11 and later). Mistral's
templates require call ids of exactly 9 letters and digits."""
from __future__ import annotations

import random
import string

from kubellm.runtime.server.tool_parsers.base import (ParsedToolCall, ToolParser,
                                                      arguments_text, decode_json_values)

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_ID_ALPHABET = string.ascii_letters + string.digits


def mistral_call_id() -> str:
    return "".join(random.choices(_ID_ALPHABET, k=9))


class MistralToolParser(ToolParser):
    name = "mistral"
    markers = (TOOL_CALLS,)

    def _calls(self, text: str) -> list[ParsedToolCall]:
        calls = []
        for part in text.split(TOOL_CALLS)[1:]:
            part = part.strip()
            if ARGS in part:                       # v11: name[ARGS]{...}
                name, _, arguments = part.partition(ARGS)
                calls.append(self._call(name.strip(), decode_json_values(arguments)[0]))
                continue
            for value in decode_json_values(part):   # v3/v7: a JSON list of calls
                for call in value if isinstance(value, list) else [value]:
                    calls.append(self._call(call["name"], call.get("arguments", {})))
        return calls

    @staticmethod
    def _call(name: str, arguments) -> ParsedToolCall:
        return ParsedToolCall(name, arguments_text(arguments), id=mistral_call_id())
