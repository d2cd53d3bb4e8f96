"""What a tool-call parser does: find the tool calls a model wrote in its own format,
split them from the plain content, and tell a stream where content ends."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ParsedToolCall:
    name: str
    arguments: str                       # JSON text, as OpenAI sends it
    id: str = field(default_factory=new_call_id)

    def to_openai(self) -> dict:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


def arguments_text(value) -> str:
    """Arguments as JSON text whether the model wrote an object or a JSON string."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value
    return json.dumps(value, ensure_ascii=False)


class ToolParser:
    """Subclasses set ``name`` and ``markers`` (text that opens tool calls) and
    implement ``_calls``; markers found anywhere start tool calls unless ``at_start``."""
    name = ""
    markers: tuple[str, ...] = ()
    at_start = False          # tool calls may only open the output (Llama 3 JSON)

    def extract(self, text: str) -> tuple[str | None, list[ParsedToolCall]]:
        """(content, tool calls). No call found: the whole text is content."""
        start = self.tool_start(text)
        if start is None:
            return text, []
        try:
            calls = self._calls(text[start:])
        except (ValueError, TypeError, KeyError, AttributeError):
            calls = []
        if not calls:
            return text, []
        content = text[:start].strip()
        return content or None, calls

    def tool_start(self, text: str) -> int | None:
        """Where tool calls begin in ``text``, or None."""
        if self.at_start:
            stripped = text.lstrip()
            offset = len(text) - len(stripped)
            return offset if stripped.startswith(self.markers) else None
        hits = [i for i in (text.find(m) for m in self.markers) if i != -1]
        return min(hits) if hits else None

    def streamable(self, text: str) -> int:
        """How much of ``text`` is surely content (may be sent as it streams): up to a
        tool-call start, minus a tail that could still become one."""
        start = self.tool_start(text)
        if start is not None:
            return start
        if self.at_start:
            stripped = text.lstrip()
            if not stripped or any(m.startswith(stripped) for m in self.markers):
                return 0
            return len(text)
        hold = 0
        for marker in self.markers:
            for length in range(min(len(marker) - 1, len(text)), 0, -1):
                if text.endswith(marker[:length]):
                    hold = max(hold, length)
                    break
        return len(text) - hold

    def markers_are_special(self, tokenizer) -> bool:
        """A marker that is a special token vanishes from text decoded with
        skip_special_tokens, so requests that parse tool calls keep special tokens."""
        special = {t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values()
                   if t.special}
        return any(m in special for m in self.markers)

    def _calls(self, text: str) -> list[ParsedToolCall]:
        raise NotImplementedError


def decode_json_values(text: str) -> list:
    """Every JSON value in ``text`` one after another (separators ; , and whitespace)."""
    decoder, values, i = json.JSONDecoder(), [], 0
    while i < len(text):
        while i < len(text) and text[i] in " \t\r\n;,":
            i += 1
        if i >= len(text):
            break
        value, i = decoder.raw_decode(text, i)
        values.append(value)
    return values
