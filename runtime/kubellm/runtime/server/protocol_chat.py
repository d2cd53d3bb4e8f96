"""The body of POST /v1/chat/completions: messages (with tool calls and tool results),
tools and tool_choice, chat-template controls, and the shared sampling fields."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.server.errors import bad_request
from kubellm.runtime.server.protocol import _Body, _SamplingFields

_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class TextPart(_Body):
    type: Literal["text"]
    text: str


class FunctionCall(_Body):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(_Body):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None     # assistant: calls it made
    tool_call_id: str | None = None              # tool: which call this answers
    reasoning_content: str | None = None


class Function(_Body):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Body):
    type: Literal["function"]
    function: Function


class NamedFunction(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    # chat templates (vLLM's fields)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    echo: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_special_tokens: bool = False
    reasoning_effort: str | None = None     # passed to templates that read it

    def to_sampling_params(self, defaults: dict, max_logprobs: int, **extra
                           ) -> SamplingParams:
        self.check_common(max_logprobs)
        if self.top_logprobs is not None:
            if not self.logprobs:
                raise bad_request("top_logprobs requires logprobs to be true",
                                  param="top_logprobs")
            if not 0 <= self.top_logprobs <= max_logprobs:
                raise bad_request(f"top_logprobs must be in 0..{max_logprobs}",
                                  param="top_logprobs")
        logprobs = (self.top_logprobs or 0) if self.logprobs else None
        max_tokens = self.max_completion_tokens
        if max_tokens is None:
            max_tokens = self.max_tokens
        return self.sampling_params(defaults, max_tokens, logprobs,
                                    prompt_logprobs=self.prompt_logprobs, **extra)

    def check_tools(self) -> str:
        """The effective tool_choice: 'none', 'auto', 'required' or 'named'."""
        tools = self.tools or []
        for i, tool in enumerate(tools):
            if not _FUNCTION_NAME.match(tool.function.name):
                raise bad_request(f"tools[{i}].function.name: function names are 1-64 "
                                  "letters, digits, _ . or -",
                                  param=f"tools[{i}].function.name")
            params = tool.function.parameters
            if params is not None and params.get("type", "object") != "object":
                raise bad_request("parameters must be a JSON schema of type object",
                                  param=f"tools[{i}].function.parameters")
        choice = self.tool_choice
        if choice is None:
            return "auto" if tools else "none"
        if choice == "none":
            return "none"
        if not tools:
            raise bad_request(f"tool_choice {self._choice_name()} needs tools",
                              param="tool_choice")
        if isinstance(choice, NamedToolChoice):
            if choice.function.name not in {t.function.name for t in tools}:
                raise bad_request(f"tool_choice names {choice.function.name!r}, which is "
                                  "not in tools", param="tool_choice")
            return "named"
        return choice

    def _choice_name(self) -> str:
        choice = self.tool_choice
        return repr(choice) if isinstance(choice, str) else "naming a function"

    def tool_dicts(self) -> list[dict] | None:
        """Tools as the chat template reads them (OpenAI's shape, as plain dicts)."""
        if not self.tools:
            return None
        return [t.model_dump(exclude_none=True) for t in self.tools]

    def template_messages(self) -> list[dict]:
        return [m.model_dump(exclude_none=True) for m in self.messages]

    def template_kwargs(self) -> dict:
        kwargs = dict(self.chat_template_kwargs or {})
        if self.reasoning_effort is not None:   # read by templates that support it
            kwargs.setdefault("reasoning_effort", self.reasoning_effort)
        return kwargs
