"""/v1/chat/completions responses, whole or streamed: the assistant message of each
choice, with tool calls read from the output (a tool parser for ``auto``, the forced
JSON for ``required`` and a named function), chat ``echo``, logprobs, and vLLM's
``prompt_logprobs`` / ``return_token_ids``.

Streaming a choice whose output may hold tool calls sends plain content as it comes
until a tool call begins (a tail that could start one is held back), then the calls in
OpenAI's delta shape: a named function's arguments stream as they are generated; parsed
calls go out whole, each as one delta, when the output ends.
"""
from __future__ import annotations

from kubellm.runtime.core.outputs import CompletionOutput, RequestOutput
from kubellm.runtime.server.completions import prompt_logprobs_json
from kubellm.runtime.server.logprobs_format import LogprobFormatter
from kubellm.runtime.server.prompts import Prompt
from kubellm.runtime.server.protocol_chat import ChatCompletionRequest
from kubellm.runtime.server.responses import envelope, usage
from kubellm.runtime.server.tool_choice import forced_calls
from kubellm.runtime.server.tool_parsers import ParsedToolCall, ToolParser

OBJECT, CHUNK = "chat.completion", "chat.completion.chunk"


class ChatResponder:
    def __init__(self, tokenizer, body: ChatCompletionRequest, request_id: str, model: str,
                 n: int, prompt: Prompt, mode: str, parser: ToolParser | None):
        self.body = body
        self.request_id = request_id
        self.model = model
        self.n = n
        self.prompt = prompt
        self.mode = mode                    # tool_choice: none | auto | required | named
        self.parser = parser if mode == "auto" else None
        self.formatter = LogprobFormatter(tokenizer, body.top_logprobs or 0,
                                          body.return_tokens_as_token_ids)
        last = body.messages[-1]
        self.echo = ""
        if body.echo and last.role == "assistant":  # vLLM: echo the message continued
            self.echo = _text(last.content)
        self._streams: dict[int, _ChoiceStream] = {}
        self._last: RequestOutput | None = None

    # ---- whole -----------------------------------------------------------------------
    def response(self, out: RequestOutput) -> dict:
        choices = [self._choice(comp) for comp in out.outputs]
        extra = {"usage": usage([out])}
        if self.body.prompt_logprobs is not None:
            extra["prompt_logprobs"] = prompt_logprobs_json(self.formatter, out.prompt_logprobs)
        if self.body.return_token_ids:
            extra["prompt_token_ids"] = list(self.prompt.token_ids)
        return envelope(self.request_id, self.model, OBJECT, choices, **extra)

    def _choice(self, comp: CompletionOutput) -> dict:
        content, calls = self.split(comp.text)
        if self.echo:
            content = self.echo + (content or "")
        message = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [c.to_openai() for c in calls]
        choice = {"index": comp.index, "message": message,
                  "logprobs": self._logprobs(comp, 0, len(comp.token_ids)),
                  "finish_reason": self.finish_reason(comp.finish_reason, calls),
                  "stop_reason": comp.stop_reason}
        if self.body.return_token_ids:
            choice["token_ids"] = list(comp.token_ids)
        return choice

    def split(self, text: str) -> tuple[str | None, list[ParsedToolCall]]:
        """(content, tool calls) of a whole output."""
        if self.mode in ("named", "required"):
            calls = forced_calls(self.body, self.mode, text)
            return (None, calls) if calls else (text, [])
        if self.parser is not None:
            content, calls = self.parser.extract(text)
            if calls and not self.body.parallel_tool_calls:
                calls = calls[:1]
            return content, calls
        return text, []

    def finish_reason(self, reason: str | None, calls) -> str | None:
        # OpenAI: "tool_calls" when the model chose to call; a forced named call is "stop"
        if calls and reason == "stop" and self.mode in ("auto", "required"):
            return "tool_calls"
        return reason

    def _logprobs(self, comp: CompletionOutput, start: int, end: int) -> dict | None:
        if not self.body.logprobs:
            return None
        return self.formatter.chat(comp.token_ids[start:end], (comp.logprobs or [])[start:end])

    # ---- streamed --------------------------------------------------------------------
    def first_chunks(self) -> list[dict]:
        # OpenAI opens every choice with the role, before any content
        chunks = [self._chunk(i, {"role": "assistant", "content": ""}, None, None)
                  for i in range(self.n)]
        if self.echo:
            chunks += [self._chunk(i, {"content": self.echo}, None, None) for i in range(self.n)]
        return chunks

    def chunks(self, _index: int, out: RequestOutput) -> list[dict]:
        self._last = out
        chunks = []
        for comp in out.outputs:
            stream = self._streams.setdefault(comp.index, _ChoiceStream(self, comp.index))
            for delta, finish_reason in stream.update(comp):
                start, end = stream.num_tokens_sent, len(comp.token_ids)
                stream.num_tokens_sent = end
                chunk = self._chunk(comp.index, delta, finish_reason,
                                    self._logprobs(comp, start, end))
                if self.body.return_token_ids:
                    chunk["choices"][0]["token_ids"] = list(comp.token_ids[start:end])
                if self.body.continuous_usage:
                    chunk["usage"] = usage([out], len(comp.token_ids))
                chunks.append(chunk)
        return chunks

    def final_chunks(self) -> list[dict]:
        if not self.body.include_usage or self._last is None:
            return []
        return [envelope(self.request_id, self.model, CHUNK, [], usage=usage([self._last]))]

    def _chunk(self, index: int, delta: dict, finish_reason, logprobs) -> dict:
        return envelope(self.request_id, self.model, CHUNK,
                        [{"index": index, "delta": delta, "logprobs": logprobs,
                          "finish_reason": finish_reason}])


class _ChoiceStream:
    """What one streamed choice has sent: content characters, and its tool calls."""

    def __init__(self, owner: ChatResponder, index: int):
        self.owner = owner
        self.index = index
        self.num_chars = 0                 # characters of the output accounted for
        self.num_tokens_sent = 0
        self.is_done = False
        self.calls: list[ParsedToolCall] = []

    def update(self, comp: CompletionOutput) -> list[tuple[dict, str | None]]:
        """(delta, finish_reason) pairs this output adds."""
        if self.is_done:
            return []
        owner, text, finished = self.owner, comp.text, comp.finished
        self.is_done = finished
        if owner.mode == "named":
            out = self._named(text)
        elif owner.mode == "required" or owner.parser is not None:
            out = self._parsed(text, finished)
        else:
            out = self._content(text, len(text))
        if finished:
            out.append(({}, owner.finish_reason(comp.finish_reason, self.calls)))
        return out

    def _content(self, text: str, end: int) -> list:
        if end <= self.num_chars:
            return []
        delta, self.num_chars = text[self.num_chars:end], end
        return [({"content": delta}, None)]

    def _named(self, text: str) -> list:
        out = []
        if not self.calls:    # the first delta names the call; its arguments follow
            self.calls = [ParsedToolCall(self.owner.body.tool_choice.function.name, "")]
            out.append(({"tool_calls": [{"index": 0, **self.calls[0].to_openai()}]}, None))
        if len(text) > self.num_chars:
            out.append(({"tool_calls": [{"index": 0, "function": {
                "arguments": text[self.num_chars:]}}]}, None))
            self.num_chars = len(text)
        return out

    def _parsed(self, text: str, finished: bool) -> list:
        owner = self.owner
        if not finished:
            return self._content(text, 0 if owner.mode == "required"
                                 else owner.parser.streamable(text))
        _, calls = owner.split(text)
        if not calls:
            return self._content(text, len(text))
        self.calls = calls
        out = []
        if owner.parser is not None:   # content before the calls not sent yet
            before = text[self.num_chars:owner.parser.tool_start(text)].rstrip()
            if before:
                out.append(({"content": before}, None))
        self.num_chars = len(text)
        return out + [({"tool_calls": [{"index": k, **c.to_openai()}]}, None)
                      for k, c in enumerate(calls)]


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(part.text for part in content)
    return content or ""
