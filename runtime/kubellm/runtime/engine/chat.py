"""Chat messages (OpenAI's shape) to a prompt, through the model's chat template or one
given with ``--chat-template`` / per request. Used by the server and by ``LLM.chat``.

Messages are brought into the shape Hugging Face chat templates read: text parts joined,
``developer`` as ``system``, and tool-call arguments as objects (OpenAI sends them as JSON
text; templates such as Llama 3.1's and Qwen2.5's render them with ``tojson``).
"""
from __future__ import annotations

import json
import os

from kubellm.runtime.core.parameter_error import ParameterError

# Keyword arguments a request may not pass to the template through chat_template_kwargs:
# they are request fields of their own, or would change what the tokenizer does.
_RESERVED_KWARGS = {"conversation", "messages", "tools", "documents", "chat_template",
                    "add_generation_prompt", "continue_final_message", "tokenize",
                    "return_dict", "return_tensors", "tokenizer_kwargs", "padding",
                    "truncation", "max_length", "return_assistant_tokens_mask"}


def load_chat_template(value: str | None) -> str | None:
    """``--chat-template``: a file's path or the template itself; None keeps the model's."""
    if value is None:
        return None
    if os.path.isfile(value):
        with open(value, encoding="utf-8") as fh:
            return fh.read()
    if "{{" in value or "{%" in value:
        return value
    raise ValueError(f"chat_template {value!r} is neither a readable file nor a Jinja template")


def template_messages(messages: list[dict]) -> list[dict]:
    """OpenAI chat messages as chat templates expect them (see the module docstring)."""
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise ParameterError(f"messages[{i}]", "must be an object with a role")
        m = {k: v for k, v in message.items() if v is not None}
        if m["role"] == "developer":
            m["role"] = "system"
        if isinstance(m.get("content"), list):
            m["content"] = _text_of(m["content"], f"messages[{i}].content")
        if m.get("tool_calls"):
            m["tool_calls"] = [_template_tool_call(c, f"messages[{i}].tool_calls[{j}]")
                               for j, c in enumerate(m["tool_calls"])]
        out.append(m)
    return out


def _text_of(parts: list, param: str) -> str:
    texts = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") != "text":
            raise ParameterError(param, "only text content parts are supported")
        texts.append(part.get("text", ""))
    return "".join(texts)


def _template_tool_call(call: dict, param: str) -> dict:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            function["arguments"] = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise ParameterError(f"{param}.function.arguments",
                                 "must be a JSON object (as text)") from None
    return {**call, "function": function, "type": call.get("type", "function")}


def render_chat(tokenizer, messages: list[dict], *, chat_template: str | None = None,
                tools: list[dict] | None = None, add_generation_prompt: bool = True,
                continue_final_message: bool = False,
                chat_template_kwargs: dict | None = None) -> str:
    """The prompt text; ParameterError naming the field when it cannot be rendered."""
    if add_generation_prompt and continue_final_message:
        raise ParameterError("continue_final_message", "cannot be combined with "
                             "add_generation_prompt: set add_generation_prompt to false")
    messages = template_messages(messages)
    if continue_final_message and (not messages or messages[-1]["role"] != "assistant"):
        raise ParameterError("continue_final_message", "the last message must be the "
                                                       "assistant's, to be continued")
    kwargs = dict(chat_template_kwargs or {})
    bad = sorted(_RESERVED_KWARGS & set(kwargs))
    if bad:
        raise ParameterError("chat_template_kwargs", f"may not set {', '.join(bad)}")
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise ParameterError("messages", "this model has no chat template; start the "
                                         "server with --chat-template or pass chat_template")
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools or None, chat_template=chat_template, tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message, **kwargs)
    except Exception as exc:  # jinja raises on what a template forbids (role order, ...)
        raise ParameterError("messages", f"cannot be rendered by the chat template: "
                                         f"{type(exc).__name__}: {exc}") from None
    if not isinstance(text, str):
        raise ParameterError("messages", "the chat template did not render to text")
    return text
