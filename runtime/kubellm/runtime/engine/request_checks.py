"""The checks a request passes before the engine queues it, beyond those SamplingParams
makes on itself: what depends on the engine (its context length, vocabulary, logprob
limit and layout)."""
from __future__ import annotations

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.core.sampling_params import ParameterError, SamplingParams

__all__ = ["PromptTooLongError", "check_params", "check_prompt"]


class PromptTooLongError(ValueError):
    """The prompt (plus room for one token) does not fit ``max_model_len``."""


def check_prompt(token_ids: list[int], max_model_len: int, vocab_size: int) -> None:
    if not token_ids:
        raise ParameterError("prompt", "must not be empty")
    if len(token_ids) + 1 > max_model_len:
        raise PromptTooLongError(
            f"the prompt has {len(token_ids)} tokens; max_model_len is {max_model_len}, "
            "which leaves no room to generate")
    if min(token_ids) < 0 or max(token_ids) >= vocab_size:
        raise ValueError(f"prompt token ids must lie in [0, {vocab_size})")


def check_params(params: SamplingParams, config: EngineConfig, vocab_size: int) -> None:
    limit = vocab_size if config.max_logprobs == -1 else config.max_logprobs
    for name in ("logprobs", "prompt_logprobs"):
        value = getattr(params, name)
        if value is not None and value > limit:
            raise ParameterError(name, f"must be <= {limit} (the server's --max-logprobs)")
    if params.prompt_logprobs is not None and \
            config.tensor_parallel_size * config.pipeline_parallel_size > 1:
        # the last stage keeps every prompt row's logits; only sampling rows reach the driver
        raise ParameterError("prompt_logprobs", "not supported yet when the model spans "
                                                "processes (tensor/pipeline parallel)")
    bad = [t for t in params.stop_token_ids if t >= vocab_size]
    if bad:
        raise ParameterError("stop_token_ids", f"token id {bad[0]} is outside the "
                                               f"vocabulary [0, {vocab_size})")
