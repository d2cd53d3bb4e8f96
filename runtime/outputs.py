"""What the engine hands back: one RequestOutput per request and step (vLLM's shape)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class CompletionOutput:
    index: int                            # which of the request's n samples
    text: str = ""                        # cumulative decoded text (stop string excluded)
    token_ids: list[int] = field(default_factory=list)   # cumulative generated ids
    finish_reason: str | None = None      # None while running; "stop" | "length" | "abort"
    stop_reason: int | str | None = None  # the stop string or token id that ended it
    # per generated token: {token_id: logprob} holding the sampled token and the top-k
    logprobs: list[dict[int, float]] | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = False
    num_cached_tokens: int = 0            # prompt tokens served from the prefix cache
    metrics: dict = field(default_factory=dict)  # arrival/first-token/finish times (s)
