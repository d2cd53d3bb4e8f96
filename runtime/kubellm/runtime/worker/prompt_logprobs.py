"""Logprobs of the prompt's own tokens (vLLM's ``prompt_logprobs``; completions ``echo``
with ``logprobs``, which is how evaluation harnesses score a continuation).

The hidden state at prompt position p predicts the token at p + 1, so each prefill chunk
[start, end) yields the logprobs of prompt tokens start+1 .. min(end, P-1): the chunk's
last row, once it reaches the prompt's end, predicts the first generated token and is
the sampler's. Logits are computed for those rows only, a slice at a time, so a long
prompt never holds [prompt length, vocab] floats at once. Only the first of a request's
n sequences computes them: the others share its prompt.
"""
from __future__ import annotations

import torch

# Rows of logits per slice: 512 x 128k fp32 = 256 MiB at most.
_ROWS_PER_SLICE = 512


class PromptLogprobs:
    """One step's prompt logprobs, still on the device, per request."""

    __slots__ = ("parts",)

    def __init__(self):
        # (request id, first position, top k, chosen ids, chosen logprobs, top lp, top ids)
        self.parts: list[tuple] = []

    def result(self) -> dict[str, tuple[int, list[dict[int, float]]]]:
        """{request id: (position of its first token here, [{token: logprob, ...}])}."""
        out = {}
        for request_id, first, k, ids, chosen, top_lp, top_ids in self.parts:
            ids, chosen = ids.tolist(), chosen.tolist()
            top_lp = top_lp.tolist() if top_lp is not None else None
            top_ids = top_ids.tolist() if top_ids is not None else None
            entries = []
            for j, token in enumerate(ids):
                entry = {token: chosen[j]}
                for t in range(k):
                    entry.setdefault(top_ids[j][t], top_lp[j][t])
                entries.append(entry)
            out[request_id] = (first, entries)
        return out


def compute_prompt_logprobs(model, hidden: torch.Tensor, scheduled) -> PromptLogprobs | None:
    """``hidden`` [num_tokens, hidden] of the step laid out as ``scheduled`` (its
    ScheduledRequests, in order); None when no request in it asks."""
    result = PromptLogprobs()
    offset = 0
    for s in scheduled:
        request = s.request
        k = request.params.prompt_logprobs
        first_row, offset = offset, offset + s.num_new_tokens
        if k is None or request.index != 0:
            continue
        end = min(s.start + s.num_new_tokens, request.num_prompt_tokens - 1)
        count = end - s.start
        if count <= 0:
            continue
        targets = torch.tensor(request.prompt_token_ids[s.start + 1:end + 1],
                               dtype=torch.int64, device=hidden.device)
        rows = hidden[first_row:first_row + count]
        chosen, top_lp, top_ids = [], [], []
        for lo in range(0, count, _ROWS_PER_SLICE):
            logprobs = model.compute_logits(rows[lo:lo + _ROWS_PER_SLICE]).float() \
                .log_softmax(dim=-1)
            chosen.append(logprobs.gather(1, targets[lo:lo + _ROWS_PER_SLICE, None])[:, 0])
            if k:
                values, ids = logprobs.topk(k, dim=-1)
                top_lp.append(values)
                top_ids.append(ids)
        result.parts.append((request.request_id, s.start + 1, k, targets, torch.cat(chosen),
                             torch.cat(top_lp) if k else None,
                             torch.cat(top_ids) if k else None))
    return result if result.parts else None
