"""Tool-call parsers for the model families kubellm serves, by vLLM's names
(``--tool-call-parser``), and the rule that picks one from a chat template when the
flag is not given."""
from __future__ import annotations

from kubellm.runtime.server.tool_parsers.base import ParsedToolCall, ToolParser
from kubellm.runtime.server.tool_parsers.hermes import HermesToolParser
from kubellm.runtime.server.tool_parsers.llama3_json import Llama3JsonToolParser
from kubellm.runtime.server.tool_parsers.mistral import MistralToolParser

PARSERS: dict[str, type[ToolParser]] = {
    "hermes": HermesToolParser,          # Hermes, Qwen2.5, Qwen3
    "llama3_json": Llama3JsonToolParser,  # Llama 3.1 / 3.2 / 3.3
    "mistral": MistralToolParser,
}

__all__ = ["PARSERS", "ParsedToolCall", "ToolParser", "get_parser", "detect_parser"]


def get_parser(name: str) -> ToolParser:
    return PARSERS[name]()


def detect_parser(chat_template: str | None) -> str | None:
    """The parser whose format a chat template writes tool calls in, if any."""
    if not chat_template:
        return None
    if "<tool_call>" in chat_template:
        return "hermes"
    if "[TOOL_CALLS]" in chat_template:
        return "mistral"
    if "<|python_tag|>" in chat_template or '"parameters": dictionary' in chat_template:
        return "llama3_json"
    return None
