"""Pieces of OpenAI's response shapes shared by the routes: ids, usage, chunk envelopes,
and what one streamed choice has sent so far.

Engine outputs are cumulative (the whole text so far); a ChoiceCursor remembers what a
client has already been sent, so each chunk carries only the new text and the tokens it
covers. Text the engine holds back (a possible stop string, an unfinished multi-byte
character) simply is not in ``text`` yet, so it is never split across chunks.
"""
from __future__ import annotations

import time
import uuid

from kubellm.runtime.core.outputs import CompletionOutput, RequestOutput


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(outs: list[RequestOutput], num_completion_tokens: int | None = None) -> dict:
    """Usage over a request's prompts: each prompt counted once, whatever n is; the
    prompt tokens served from the prefix cache as ``prompt_tokens_details``."""
    prompt = sum(len(o.prompt_token_ids) for o in outs)
    completion = num_completion_tokens
    if completion is None:
        completion = sum(len(c.token_ids) for o in outs for c in o.outputs)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(o.num_cached_tokens for o in outs)}}


def envelope(request_id: str, model: str, object_name: str, choices: list[dict],
             **extra) -> dict:
    return {"id": request_id, "object": object_name, "created": int(time.time()),
            "model": model, "choices": choices, **extra}


class ChoiceCursor:
    """What one choice (sample) of a stream has sent so far."""

    def __init__(self, index: int):
        self.index = index
        self.num_chars = 0
        self.num_tokens = 0
        self.is_done = False
        self.is_started = False

    def advance(self, comp: CompletionOutput):
        """(delta text, first new token, end token, finish_reason) or None if nothing new."""
        if self.is_done:
            return None
        delta = comp.text[self.num_chars:]
        if not delta and not comp.finished:
            return None  # tokens without text yet: send their logprobs with the next text
        start, end = self.num_tokens, len(comp.token_ids)
        self.num_chars, self.num_tokens = len(comp.text), end
        self.is_done = comp.finished
        return delta, start, end, comp.finish_reason
