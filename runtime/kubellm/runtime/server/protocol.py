"""Request bodies of the OpenAI API (plus vLLM's extensions): parsing, the fields both
routes share, and their translation to SamplingParams. Everything here is pure
validation: a request that passes it is safe to hand to the engine; one that fails
raises APIError 400 naming the parameter.

No silent ignores: every field of OpenAI's completions and chat APIs either works or,
where it asks for something kubellm does not do, gets a 400 naming it (``UNSUPPORTED``).
Fields nobody defined are accepted, as vLLM does, so that newer clients keep working,
and logged once per name so that an operator sees what is being dropped.
"""
from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from kubellm.runtime.core.sampling_params import ParameterError, SamplingParams
from kubellm.runtime.server.errors import bad_request
from kubellm.runtime.server.json_body import parse_json_object
from kubellm.runtime.server.structured_request import structured_outputs

logger = logging.getLogger("kubellm.server")

# Unions whose per-member pydantic errors would only confuse; one sentence instead.
_UNION_MESSAGES = {
    "prompt": "must be a string, a list of token ids, or a list of either",
    "stop": "must be a string or a list of strings",
    "content": "must be a string or a list of {'type': 'text', 'text': ...} parts",
    "tool_choice": "must be 'none', 'auto', 'required' or {'type': 'function', "
                   "'function': {'name': ...}}",
}

# Known fields kubellm cannot honour: name -> (values that ask for nothing, why not).
UNSUPPORTED: dict[str, tuple[tuple, str]] = {
    "suffix": ((None, ""), "suffix (fill-in-the-middle) is not supported"),
    "audio": ((None,), "audio output is not supported"),
    "modalities": ((None, ["text"]), "only the text modality is supported"),
    "prediction": ((None,), "predicted outputs are not supported"),
    "web_search_options": ((None,), "web search is not supported"),
    "functions": ((None,), "functions is deprecated and not supported: use tools"),
    "function_call": ((None,), "function_call is deprecated and not supported: use "
                               "tool_choice"),
    "store": ((None, False), "stored completions are not supported"),
    "service_tier": ((None, "auto", "default"), "only service_tier 'auto' or 'default' is "
                                                "supported"),
    "verbosity": ((None,), "verbosity is not supported"),
    "use_beam_search": ((None, False), "beam search is not supported"),
    "length_penalty": ((None, 1, 1.0), "length_penalty needs beam search, which is not "
                                       "supported"),
    "bad_words": ((None, []), "bad_words is not supported"),
    "logits_processors": ((None, []), "custom logits processors are not supported"),
    "documents": ((None,), "documents (RAG chat templates) are not supported"),
    "mm_processor_kwargs": ((None, {}), "multimodal inputs are not supported"),
    "spaces_between_special_tokens": ((None, True), "spaces_between_special_tokens=false "
                                                    "is not supported"),
}

_warned_unknown: set[str] = set()


class _Body(BaseModel):
    # strict: "5" is not an integer and 1 is not a boolean, as in OpenAI's API.
    # extra fields are accepted, as vLLM does, and logged once (parse_body).
    model_config = ConfigDict(extra="allow", strict=True)


class StreamOptions(_Body):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class _SamplingFields(_Body):
    """What both routes share: OpenAI's sampling fields and vLLM's extensions."""
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
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    logit_bias: dict[str, float] | None = None
    allowed_token_ids: list[int] | None = None
    prompt_logprobs: int | None = None
    truncate_prompt_tokens: int | None = None
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False
    priority: int = 0
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # OpenAI identifiers for abuse monitoring and caching: accepted, nothing to do here
    # (the prefix cache is automatic)
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    metadata: dict[str, str] | None = None
    # structured outputs (server/structured_request.py)
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: str | dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_whitespace_pattern: str | None = None

    def sampling_params(self, defaults: dict, max_tokens: int | None, logprobs: int | None,
                        **extra) -> SamplingParams:
        """``defaults``: the model's generation_config values for unset fields."""
        def pick(name, fallback):
            value = getattr(self, name)
            return defaults.get(name, fallback) if value is None else value
        if max_tokens is None:
            max_tokens = defaults.get("max_tokens")
        try:
            fields = dict(
                n=self.n, max_tokens=max_tokens, min_tokens=self.min_tokens,
                temperature=pick("temperature", 1.0), top_p=pick("top_p", 1.0),
                top_k=pick("top_k", -1), min_p=pick("min_p", 0.0),
                repetition_penalty=pick("repetition_penalty", 1.0),
                presence_penalty=pick("presence_penalty", 0.0),
                frequency_penalty=pick("frequency_penalty", 0.0),
                seed=self.seed, stop=[] if self.stop is None else self.stop,
                stop_token_ids=self.stop_token_ids or [], ignore_eos=self.ignore_eos,
                include_stop_str_in_output=self.include_stop_str_in_output,
                logprobs=logprobs, skip_special_tokens=self.skip_special_tokens,
                logit_bias=self.logit_bias, allowed_token_ids=self.allowed_token_ids,
                truncate_prompt_tokens=self.truncate_prompt_tokens)
            if "structured_outputs" not in extra:
                fields["structured_outputs"] = structured_outputs(self)
            return SamplingParams(**{**fields, **extra})
        except ParameterError as exc:
            raise bad_request(str(exc), param=exc.param) from None

    def check_common(self, max_logprobs: int) -> None:
        """Checks that depend on nothing but the body and the server's limits."""
        if self.stream_options is not None and not self.stream:
            # as OpenAI and vLLM: options of a stream that is not one are a mistake
            raise bad_request("stream_options is only allowed when stream is true",
                              param="stream_options")
        for name, value in (("prompt_logprobs", self.prompt_logprobs),):
            if value is not None and not 0 <= value <= max_logprobs:
                raise bad_request(f"{name} must be in 0..{max_logprobs}", param=name)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.continuous_usage_stats)


def parse_body(raw: bytes, model_cls: type[_Body]) -> _Body:
    """JSON bytes -> a validated request, or APIError 400 naming the first bad field."""
    data = parse_json_object(raw)
    for name, (accepted, why) in UNSUPPORTED.items():
        if name in data and data[name] not in accepted:
            raise bad_request(f"{name}: {why}", param=name)
    try:
        body = model_cls.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None
    _log_unknown_fields(body)
    return body


def _log_unknown_fields(body: _Body) -> None:
    for name in (body.model_extra or {}):
        if name not in UNSUPPORTED and name not in _warned_unknown:
            _warned_unknown.add(name)
            logger.warning("ignoring the unknown request field %r (logged once per name)",
                           name)


def _validation_error(exc: ValidationError):
    err = exc.errors()[0]
    loc = list(err["loc"])
    path = [str(loc[0])] if loc else []
    for part in loc[1:]:
        if isinstance(part, int):
            path.append(f"[{part}]")
        elif part.isidentifier() and part not in ("str", "int", "float", "bool", "list",
                                                   "dict"):
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

