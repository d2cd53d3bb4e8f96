"""One sequence the scheduler runs: its tokens, progress and scheduling attributes.

A user request with ``n > 1`` becomes ``n`` of these (ids ``"<id>#<i>"``); the engine
groups their outputs back. The scheduler sees token counts only; the detokenizer and
sampling state ride along for the engine's post-processing.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from kubellm.runtime.core.sampling_params import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int = 0
    arrival_time: float = field(default_factory=time.monotonic)
    output_token_ids: list[int] = field(default_factory=list)
    all_token_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    num_computed_tokens: int = 0
    # tokens sampled by a launched step but not yet back on the host (0 or 1 when the
    # scheduler runs; the engine's async scheduling plans the next step around them)
    num_pending_tokens: int = 0
    # allocate is a no-op while the computed tokens stay within this many (the KV
    # manager's num_noop_tokens, kept here by the scheduler; 0 when it has no blocks)
    num_kv_noop_tokens: int = 0
    num_cached_tokens: int = 0      # prompt tokens served from the prefix cache (first hit)
    num_preemptions: int = 0
    steps_in_slice: int = 0          # timeslice policy: steps since (re)admission
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    max_tokens: int = 16             # resolved against max_model_len by the engine
    first_scheduled_time: float | None = None   # set once, on first admission
    first_token_time: float | None = None
    # engine-side companions (its user request, sampling state, detokenizer, logprobs)
    group: Any = None
    index: int = 0                   # which of the group's n samples
    sampling_state: Any = None
    detokenizer: Any = None
    logprobs: list | None = None
    # the metrics dict of its running outputs (one-sequence requests): built when they
    # are first reported and handed, the same object, to every step's output while its
    # values hold; None: build anew (the scheduler resets it when it preempts the request,
    # since num_preemptions changes). Never mutated once built
    output_metrics: dict | None = None
    # while its outputs go out as compact deltas (OutputProcessor, with a delta encoder):
    # (metrics dict, request id, output token ids, the encoder's sent counts, the output
    # length at which it stops, whether EOS may stop it). What the hot row checks each
    # step, minus what cannot change while the metrics dict holds
    steady_delta: tuple | None = None

    def __post_init__(self):
        if not self.all_token_ids:
            self.all_token_ids = list(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_scheduled_tokens(self) -> int:
        """Tokens the scheduler may compute: the known ones plus the pending ones."""
        return len(self.all_token_ids) + self.num_pending_tokens

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def append_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)
