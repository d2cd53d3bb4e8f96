"""Request bodies of the OpenAI API (plus vLLM's extensions) and their translation to
SamplingParams. Everything here is pure validation: a request that passes it is safe to
hand to the engine; one that fails raises APIError 400 naming the parameter."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kubellm.runtime.core.sampling_params import MAX_LOGPROBS, ParameterError, SamplingParams
from kubellm.runtime.server.errors import bad_request
from kubellm.runtime.server.json_body import parse_json_object

# Unions whose per-member pydantic errors would only confuse; one sentence instead.
_UNION_MESSAGES = {
    "prompt": "must be a string, a list of token ids, or a one-element list of either",
    "stop": "must be a string or a list of strings",
    "content": "must be a string or a list of {'type': 'text', 'text': ...} parts",
}


class _Body(BaseModel):
    # strict: "5" is not an integer and 1 is not a boolean, as in OpenAI's API.
    # extra fields are ignored, as vLLM does, so newer clients keep working.
    model_config = ConfigDict(extra="ignore", strict=True)


class StreamOptions(_Body):
    include_usage: bool = False


class _SamplingFields(_Body):
    model: str | None = None
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    priority: int = 0
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None

    def _sampling_params(self, max_tokens: int | None, logprobs: int | None) -> SamplingParams:
        if self.stream_options is not None and not self.stream:
            # as OpenAI and vLLM: options of a stream that is not one are a mistake
            raise bad_request("stream_options is only allowed when stream is true",
                              param="stream_options")

        def pick(value, default):
            return default if value is None else value
        try:
            return SamplingParams(
                n=self.n, max_tokens=max_tokens, min_tokens=self.min_tokens,
                temperature=pick(self.temperature, 1.0), top_p=pick(self.top_p, 1.0),
                top_k=pick(self.top_k, -1), min_p=pick(self.min_p, 0.0),
                repetition_penalty=pick(self.repetition_penalty, 1.0),
                presence_penalty=pick(self.presence_penalty, 0.0),
                frequency_penalty=pick(self.frequency_penalty, 0.0),
                seed=self.seed, stop=pick(self.stop, []),
                stop_token_ids=pick(self.stop_token_ids, []), ignore_eos=self.ignore_eos,
                logprobs=logprobs, skip_special_tokens=self.skip_special_tokens)
        except ParameterError as exc:
            raise bad_request(str(exc), param=exc.param) from None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    def sampling_params(self) -> SamplingParams:
        if self.echo:
            raise bad_request("echo is not supported", param="echo")
        if self.suffix:
            raise bad_request("suffix is not supported", param="suffix")
        if self.best_of is not None and self.best_of != self.n:
            raise bad_request("best_of must equal n (beam search is not supported)",
                              param="best_of")
        return self._sampling_params(self.max_tokens, self.logprobs)

    def single_prompt(self) -> str | list[int]:
        """The one prompt of this request: a string or a list of token ids."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise bad_request("batched prompts are not supported; send one prompt per "
                                  "request", param="prompt")
            prompt = prompt[0]
        if len(prompt) == 0:
            raise bad_request("prompt must not be empty", param="prompt")
        return prompt


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    add_generation_prompt: bool = True

    def sampling_params(self) -> SamplingParams:
        if self.top_logprobs is not None:
            if not self.logprobs:
                raise bad_request("top_logprobs requires logprobs to be true",
                                  param="top_logprobs")
            if not 0 <= self.top_logprobs <= MAX_LOGPROBS:
                raise bad_request(f"top_logprobs must be in 0..{MAX_LOGPROBS}",
                                  param="top_logprobs")
        logprobs = (self.top_logprobs or 0) if self.logprobs else None
        max_tokens = self.max_completion_tokens
        if max_tokens is None:
            max_tokens = self.max_tokens
        return self._sampling_params(max_tokens, logprobs)

    def template_messages(self) -> list[dict]:
        # "developer" is OpenAI's newer name for "system"; chat templates know only the latter.
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                for m in self.messages]


def parse_body(raw: bytes, model_cls: type[_Body]) -> _Body:
    """JSON bytes -> a validated request, or APIError 400 naming the first bad field."""
    data = parse_json_object(raw)
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None


def _validation_error(exc: ValidationError):
    err = exc.errors()[0]
    loc = list(err["loc"])
    path = [str(loc[0])] if loc else []
    for part in loc[1:]:
        if isinstance(part, int):
            path.append(f"[{part}]")
        elif part.isidentifier() and part not in ("str", "int", "float", "bool", "list"):
            path.append(f".{part}")
        else:  # a union member's tag such as 'list[int]': stop at the field
            break
    param = "".join(path) or None
    field = path[-1].lstrip(".") if path else ""
    if err["type"] == "missing":
        message = f"{param} is required"
    elif field in _UNION_MESSAGES and len(loc) > len(path):
        message = f"{param} {_UNION_MESSAGES[field]}"
    else:
        message = f"{param}: {err['msg']}" if param else err["msg"]
    return bad_request(message, param=param)
