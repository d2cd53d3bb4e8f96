"""Incremental detokenization with stop strings, for streaming.

Each new token is decoded in a short window of ids (the prefix_offset/read_offset scheme
vLLM and TGI use): the text of ids[prefix:read] is known to be complete, so decoding
ids[prefix:] and dropping that known text yields the new characters, with the tokenizer's
own merging rules (leading spaces, byte fallback) applied in context. The window restarts
whenever text is emitted, so each step costs O(1) regardless of the output's length.

Two things are held back from the caller: text ending in U+FFFD (a multi-byte character
whose remaining bytes are in later tokens), and a tail that could be the start of a stop
string, so a streaming client never sees half a character or part of a stop string.
"""
from __future__ import annotations

from kubellm.runtime.core.sampling_params import SamplingParams

# Prompt tokens decoded ahead of the first output token: enough context for tokenizers
# whose pieces depend on their neighbour (SentencePiece's leading space).
_PROMPT_CONTEXT_TOKENS = 5
_INCOMPLETE_CHAR = "\ufffd"


def raw_decoder(tokenizer):
    """The Rust ``tokenizers.Tokenizer.decode`` under a Hugging Face fast tokenizer whose
    ``_decode`` is the library's own, else None. Without clean-up that is all
    ``tokenizer.decode`` does, and its Python wrapper (argument conversion, kwargs) cost
    most of each call: two calls per streamed token."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if type(backend).__name__ != "Tokenizer" or type(backend).__module__ != "tokenizers":
        return None
    owner = next((c for c in type(tokenizer).__mro__ if "_decode" in vars(c)), None)
    if owner is None or owner.__module__ not in _HF_FAST_MODULES:
        return None
    return backend.decode


_HF_FAST_MODULES = ("transformers.tokenization_utils_tokenizers",
                    "transformers.tokenization_utils_fast")


class IncrementalDetokenizer:
    """Turns one sequence's output tokens into text deltas that are safe to stream.

    ``output_text`` is exactly the concatenation of all deltas returned so far: held-back
    text joins it once released (or at ``flush()``), a stop string only with
    ``include_stop_str_in_output``.
    """

    def __init__(self, tokenizer, prompt_token_ids: list[int], params: SamplingParams):
        self._tokenizer = tokenizer
        self._raw_decode = raw_decoder(tokenizer)
        self._skip_special = params.skip_special_tokens
        self._stops = list(params.stop)
        self._include_stop = params.include_stop_str_in_output
        self._longest_stop = max((len(s) for s in self._stops), default=0)
        context = list(prompt_token_ids[-_PROMPT_CONTEXT_TOKENS:])
        if self._decode(context).endswith(_INCOMPLETE_CHAR):
            # A prompt cut inside a character: its text is no stable prefix to diff against.
            context = []
        self._ids = context                   # window context + every output id
        self._prefix_offset = 0
        self._read_offset = len(context)
        # Decoded but not yet emitted. Invariant: it holds the longest tail of the whole
        # text that a stop string starts with, so stop matching only ever looks here.
        self._pending = ""
        self._emitted: list[str] = []
        self.stop_reason: str | None = None
        self.is_stopped = False

    @property
    def output_text(self) -> str:
        if len(self._emitted) > 1:            # join once, keep one piece
            self._emitted[:] = ["".join(self._emitted)]
        return self._emitted[0] if self._emitted else ""

    def append(self, token_id: int) -> str:
        """Add one generated token; return the new text that may be shown now."""
        if self.is_stopped:
            raise RuntimeError(f"append({token_id}) after the sequence stopped at "
                               f"stop string {self.stop_reason!r}")
        self._ids.append(token_id)
        self._pending += self._decode_new(final=False)
        return self._release(final=False)

    def flush(self) -> str:
        """At the end of the sequence: release everything held back (an unfinished
        character decodes as U+FFFD, as a full decode would)."""
        if self.is_stopped:
            return ""
        self._pending += self._decode_new(final=True)
        return self._release(final=True)

    def _decode_new(self, final: bool) -> str:
        known = self._decode(self._ids[self._prefix_offset:self._read_offset])
        current = self._decode(self._ids[self._prefix_offset:])
        if len(current) <= len(known) or (current.endswith(_INCOMPLETE_CHAR) and not final):
            return ""                          # nothing new yet, or a character is unfinished
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        return current[len(known):]

    def _decode(self, ids: list[int]) -> str:
        if self._raw_decode is not None:
            return self._raw_decode(ids, skip_special_tokens=self._skip_special)
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special,
                                      clean_up_tokenization_spaces=False)

    def _release(self, final: bool) -> str:
        """Cut at a completed stop string; otherwise emit all but a possible stop prefix."""
        pending, end = self._pending, len(self._pending)
        if self._stops:
            found = [(i, s) for s in self._stops if (i := pending.find(s)) != -1]
            if found:
                end, self.stop_reason = min(found, key=lambda hit: hit[0])
                if self._include_stop:
                    end += len(self.stop_reason)
                self.is_stopped = True
            elif not final:
                end -= self._stop_prefix_length()
        delta, self._pending = pending[:end], ("" if self.is_stopped else pending[end:])
        if delta:
            self._emitted.append(delta)
        return delta

    def _stop_prefix_length(self) -> int:
        """Length of the longest tail of the pending text that some stop string starts with."""
        text = self._pending
        for length in range(min(len(text), self._longest_stop - 1), 0, -1):
            tail = text[-length:]
            if any(s.startswith(tail) for s in self._stops if len(s) > length):
                return length
        return 0
