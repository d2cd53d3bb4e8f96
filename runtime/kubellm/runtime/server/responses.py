"""Response bodies and stream chunks in OpenAI's shapes, built from engine outputs.

Engine outputs are cumulative (the whole text so far); a ChoiceCursor remembers what a
client has already been sent, so each chunk carries only the new text and the logprobs of
the tokens it covers. Text the engine holds back (a possible stop string, an unfinished
multi-byte character) simply is not in ``text`` yet, so it is never split across chunks.
"""
from __future__ import annotations

import time
import uuid

from kubellm.runtime.core.outputs import CompletionOutput, RequestOutput


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(out: RequestOutput) -> dict:
    prompt = len(out.prompt_token_ids)
    completion = sum(len(o.token_ids) for o in out.outputs)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


class ChoiceCursor:
    """What one choice (sample) of a stream has sent so far."""

    def __init__(self, index: int):
        self.index = index
        self.num_chars = 0
        self.num_tokens = 0
        self.is_done = False

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


class LogprobFormatter:
    """Turns the engine's per-token ``{token_id: logprob}`` dicts into OpenAI's two formats."""

    def __init__(self, tokenizer, top_k: int):
        self.tokenizer = tokenizer
        self.top_k = top_k

    def _piece(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def _entries(self, comp: CompletionOutput, start: int, end: int):
        for token_id, scores in zip(comp.token_ids[start:end], (comp.logprobs or [])[start:end]):
            top = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)[:self.top_k]
            yield token_id, scores.get(token_id, float("-inf")), top

    def completion(self, comp: CompletionOutput, start: int, end: int, text_offset: int) -> dict:
        tokens, token_logprobs, top_logprobs, offsets = [], [], [], []
        for token_id, logprob, top in self._entries(comp, start, end):
            piece = self._piece(token_id)
            tokens.append(piece)
            token_logprobs.append(logprob)
            top_logprobs.append({self._piece(t): lp for t, lp in top})
            offsets.append(text_offset)
            text_offset += len(piece)
        return {"tokens": tokens, "token_logprobs": token_logprobs,
                "top_logprobs": top_logprobs, "text_offset": offsets}

    def chat(self, comp: CompletionOutput, start: int, end: int) -> dict:
        content = []
        for token_id, logprob, top in self._entries(comp, start, end):
            piece = self._piece(token_id)
            content.append({"token": piece, "logprob": logprob, "bytes": list(piece.encode()),
                            "top_logprobs": [
                                {"token": self._piece(t), "logprob": lp,
                                 "bytes": list(self._piece(t).encode())} for t, lp in top]})
        return {"content": content}


def completion_response(request_id: str, model: str, out: RequestOutput,
                        logprobs: LogprobFormatter | None) -> dict:
    choices = [{"index": c.index, "text": c.text, "finish_reason": c.finish_reason,
                "logprobs": logprobs.completion(c, 0, len(c.token_ids), 0) if logprobs else None}
               for c in out.outputs]
    return {"id": request_id, "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": usage(out)}


def chat_response(request_id: str, model: str, out: RequestOutput,
                  logprobs: LogprobFormatter | None) -> dict:
    choices = [{"index": c.index, "message": {"role": "assistant", "content": c.text},
                "finish_reason": c.finish_reason,
                "logprobs": logprobs.chat(c, 0, len(c.token_ids)) if logprobs else None}
               for c in out.outputs]
    return {"id": request_id, "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": usage(out)}


def completion_chunk(request_id: str, model: str, index: int, text: str,
                     finish_reason: str | None, logprobs: dict | None) -> dict:
    return {"id": request_id, "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": [{"index": index, "text": text,
                                         "finish_reason": finish_reason, "logprobs": logprobs}]}


def chat_chunk(request_id: str, model: str, index: int, delta: dict,
               finish_reason: str | None, logprobs: dict | None) -> dict:
    return {"id": request_id, "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model, "choices": [{"index": index, "delta": delta,
                                         "finish_reason": finish_reason, "logprobs": logprobs}]}


def usage_chunk(request_id: str, model: str, object_name: str, out: RequestOutput) -> dict:
    return {"id": request_id, "object": object_name, "created": int(time.time()),
            "model": model, "choices": [], "usage": usage(out)}
