"""Per-request sampling parameters (the fields users know from vLLM and OpenAI).

Plain data (numbers, strings, lists, dicts and the StructuredOutputsParams dataclass), so
that a request crosses a process boundary as it is; everything a field needs on the
device (bias tensors, grammar matchers) is built from it on the sampler's side.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kubellm.runtime.core.parameter_error import ParameterError
from kubellm.runtime.core.structured_outputs import StructuredOutputsParams

__all__ = ["SamplingParams", "ParameterError", "StructuredOutputsParams"]

MAX_STOP_STRINGS = 16
MAX_LOGIT_BIAS = 100.0   # OpenAI's range for logit_bias values


@dataclass
class SamplingParams:
    n: int = 1
    max_tokens: int | None = 16          # None: up to max_model_len
    min_tokens: int = 0
    temperature: float = 1.0              # 0 means greedy
    top_p: float = 1.0
    top_k: int = -1                       # -1 or 0: disabled
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    # per generated token: the sampled token's logprob and the top-k others
    logprobs: int | None = None
    # per prompt token (from the second on): its logprob and the top-k others
    prompt_logprobs: int | None = None
    logit_bias: dict[int, float] | None = None     # token id -> added to its logit
    allowed_token_ids: list[int] | None = None     # only these may be sampled
    structured_outputs: StructuredOutputsParams | None = None
    include_stop_str_in_output: bool = False
    truncate_prompt_tokens: int | None = None      # keep only the prompt's last k tokens
    skip_special_tokens: bool = True
    detokenize: bool = True               # False: token ids only (benchmarks, no tokenizer)
    # "cumulative": an output every step (streaming); "final_only": only when finished,
    # which spares offline runs the per-step output objects
    output_kind: str = "cumulative"

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.top_k == 0:
            self.top_k = -1
        if self.structured_outputs is not None:
            self.structured_outputs = StructuredOutputsParams.from_value(self.structured_outputs)
        if self.logit_bias is not None:
            self.logit_bias = _logit_bias(self.logit_bias)
        if self.allowed_token_ids is not None:
            self.allowed_token_ids = list(self.allowed_token_ids)
        self._validate()

    @property
    def reads_output_tokens(self) -> bool:
        """Penalties, min_tokens and a grammar look at the tokens generated so far (on
        the host), so a step cannot sample such a request before its last token lands."""
        return (self.min_tokens > 0 or self.repetition_penalty != 1.0
                or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0
                or self.structured_outputs is not None)

    @property
    def needs_logits_processing(self) -> bool:
        """The sampler changes this request's logits beyond temperature/top-k/top-p/min-p."""
        return (self.logit_bias is not None or self.allowed_token_ids is not None
                or self.structured_outputs is not None)

    @property
    def is_special(self) -> bool:
        """Asks for work that plain requests never pay for (the engine counts these, so a
        step with none of them skips every check for them)."""
        return self.needs_logits_processing or self.prompt_logprobs is not None

    def clone(self, **changes) -> "SamplingParams":
        return dataclasses.replace(self, **changes)

    def _validate(self) -> None:
        _int_in("n", self.n, low=1, high=128)
        if self.max_tokens is not None:
            _int_in("max_tokens", self.max_tokens, low=1)
        _int_in("min_tokens", self.min_tokens, low=0)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ParameterError("min_tokens", "must not exceed max_tokens")
        _number_in("temperature", self.temperature, low=0.0, high=100.0)
        _number_in("top_p", self.top_p, low=0.0, high=1.0, low_open=True)
        _int_in("top_k", self.top_k, low=-1)
        _number_in("min_p", self.min_p, low=0.0, high=1.0)
        _number_in("repetition_penalty", self.repetition_penalty, low=0.0, low_open=True,
                   high=100.0)
        _number_in("presence_penalty", self.presence_penalty, low=-2.0, high=2.0)
        _number_in("frequency_penalty", self.frequency_penalty, low=-2.0, high=2.0)
        if self.seed is not None:
            _int_in("seed", self.seed, low=-(2**63), high=2**63 - 1)
        if len(self.stop) > MAX_STOP_STRINGS:
            raise ParameterError("stop", f"at most {MAX_STOP_STRINGS} stop strings")
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise ParameterError("stop", "stop strings must be non-empty strings")
        for t in self.stop_token_ids:
            _int_in("stop_token_ids", t, low=0)
        for name in ("logprobs", "prompt_logprobs"):
            if getattr(self, name) is not None:
                _int_in(name, getattr(self, name), low=0)
        if self.allowed_token_ids is not None:
            if not self.allowed_token_ids:
                raise ParameterError("allowed_token_ids", "must not be empty")
            for t in self.allowed_token_ids:
                _int_in("allowed_token_ids", t, low=0)
        if self.truncate_prompt_tokens is not None:
            _int_in("truncate_prompt_tokens", self.truncate_prompt_tokens, low=1)
        for name in ("include_stop_str_in_output", "skip_special_tokens", "detokenize"):
            if not isinstance(getattr(self, name), bool):
                raise ParameterError(name, "must be a boolean")
        if self.output_kind not in ("cumulative", "final_only"):
            raise ParameterError("output_kind", "must be 'cumulative' or 'final_only'")
        if not isinstance(self.ignore_eos, bool):
            raise ParameterError("ignore_eos", "must be a boolean")


def _logit_bias(bias) -> dict[int, float]:
    """{token id: bias}; JSON object keys arrive as strings of digits."""
    if not isinstance(bias, dict):
        raise ParameterError("logit_bias", "must be an object mapping token ids to numbers")
    out = {}
    for key, value in bias.items():
        token = key
        if isinstance(key, str):
            if not key.strip().lstrip("-").isdigit():
                raise ParameterError("logit_bias", f"key {key!r} is not a token id")
            token = int(key)
        _int_in("logit_bias", token, low=0)
        _number_in("logit_bias", value, low=-MAX_LOGIT_BIAS, high=MAX_LOGIT_BIAS)
        out[token] = float(value)
    return out


def _int_in(name, value, low=None, high=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(name, f"must be an integer, got {type(value).__name__}")
    if low is not None and value < low:
        raise ParameterError(name, f"must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ParameterError(name, f"must be <= {high}, got {value}")


def _number_in(name, value, low=None, high=None, low_open=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParameterError(name, f"must be a number, got {type(value).__name__}")
    if value != value:
        raise ParameterError(name, "must not be NaN")
    if low is not None and (value <= low if low_open else value < low):
        raise ParameterError(name, f"must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and value > high:
        raise ParameterError(name, f"must be <= {high}, got {value}")
