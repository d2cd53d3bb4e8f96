"""What the engine hands back: one RequestOutput per request and step (vLLM's shape)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


class PrefixView(Sequence):
    """The first ``length`` items of a list that only grows: what a running request's
    output holds instead of a copy, so that streaming a long generation costs O(1) per
    step rather than O(tokens). Reads like a list (len, index, slice, iterate, ==)."""

    # (OutputProcessor.process builds a running row's token view on object.__new__,
    # setting both slots: a slot added here must be set there too)
    __slots__ = ("_items", "_length")

    def __init__(self, items: list, length: int):
        self._items, self._length = items, length

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._items[:self._length][index] if index.step else \
                self._items[slice(*index.indices(self._length))]
        if not -self._length <= index < self._length:
            raise IndexError("PrefixView index out of range")
        return self._items[index % self._length]

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == self._length and \
            all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return repr(self._items[:self._length])


@dataclass(slots=True)
class CompletionOutput:
    index: int                            # which of the request's n samples
    text: str = ""                        # cumulative decoded text (stop string excluded)
    # cumulative generated ids: a list once finished, a PrefixView while running
    token_ids: Sequence[int] = field(default_factory=list)
    finish_reason: str | None = None      # None while running; "stop" | "length" | "abort"
    stop_reason: int | str | None = None  # the stop string or token id that ended it
    # per generated token: {token_id: logprob} holding the sampled token and the top-k
    logprobs: Sequence[dict[int, float]] | None = None

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
    # with prompt_logprobs: None for the first prompt token, then {token id: logprob}
    # holding that prompt token and the top-k others
    prompt_logprobs: list[dict[int, float] | None] | None = None
    # arrival/first-token/finish times (s) and preemptions. Read-only: the outputs of a
    # running request's successive steps may share one dict (the engine builds a new one
    # when a value changes, never changing one it has handed out)
    metrics: dict = field(default_factory=dict)
