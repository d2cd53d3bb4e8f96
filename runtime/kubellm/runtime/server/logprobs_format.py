"""The engine's per-token ``{token id: logprob}`` dicts in OpenAI's two logprob formats.

Each dict holds the token the entry is about (sampled, or the prompt's own) and the top
k others. Completions list up to k + 1 per token: the top k, plus that token when it is
not among them (OpenAI and vLLM always include it). Chat lists the top k alone, sorted;
the token itself is the entry's ``token`` / ``logprob``.
"""
from __future__ import annotations

from collections.abc import Sequence


class LogprobFormatter:
    def __init__(self, tokenizer, top_k: int, as_token_ids: bool = False):
        self.tokenizer = tokenizer
        self.top_k = top_k
        self.as_token_ids = as_token_ids     # vLLM's return_tokens_as_token_ids
        self._pieces: dict[int, str] = {}

    def piece(self, token_id: int) -> str:
        if self.as_token_ids:
            return f"token_id:{token_id}"
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self.tokenizer.decode([token_id])
        return piece

    def _top(self, scores: dict[int, float]) -> list[tuple[int, float]]:
        return sorted(scores.items(), key=lambda kv: kv[1], reverse=True)[:self.top_k]

    def completion(self, token_ids: Sequence[int], entries: Sequence[dict | None],
                   text_offset: int) -> dict:
        """OpenAI completions logprobs for ``token_ids`` (an entry None: the first prompt
        token, which nothing predicts)."""
        tokens, token_logprobs, top_logprobs, offsets = [], [], [], []
        for token_id, scores in zip(token_ids, entries):
            piece = self.piece(token_id)
            tokens.append(piece)
            offsets.append(text_offset)
            text_offset += len(piece)
            if scores is None:
                token_logprobs.append(None)
                top_logprobs.append(None)
                continue
            logprob = scores.get(token_id, float("-inf"))
            token_logprobs.append(logprob)
            top = dict((self.piece(t), lp) for t, lp in self._top(scores))
            top.setdefault(piece, logprob)
            top_logprobs.append(top)
        return {"tokens": tokens, "token_logprobs": token_logprobs,
                "top_logprobs": top_logprobs, "text_offset": offsets}

    def chat(self, token_ids: Sequence[int], entries: Sequence[dict]) -> dict:
        content = []
        for token_id, scores in zip(token_ids, entries):
            piece = self.piece(token_id)
            content.append({"token": piece, "logprob": scores.get(token_id, float("-inf")),
                            "bytes": list(piece.encode()),
                            "top_logprobs": [{"token": self.piece(t), "logprob": lp,
                                              "bytes": list(self.piece(t).encode())}
                                             for t, lp in self._top(scores)]})
        return {"content": content}
