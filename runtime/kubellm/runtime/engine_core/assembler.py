"""The front end's half of post-processing: the core sends token ids, the front end turns
them into text (vLLM V1 and SGLang detokenize outside the engine too), applies stop
strings, and hands the routes the same cumulative RequestOutputs the engine builds
offline.

The core runs with ``detokenize=False``, so it stops a sequence only for EOS, a stop
token id, max_tokens or max_model_len; the last token of a "stop" without a stop string
(EOS or a stop token id) is not part of the text, as offline. A stop string is found
here: the sequence ends at that token and the core is told to stop generating for it.
"""
from __future__ import annotations

import dataclasses
import operator

from kubellm.runtime.core.detokenizer import IncrementalDetokenizer
from kubellm.runtime.core.outputs import CompletionOutput, PrefixView, RequestOutput
from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.engine_core.output_delta import (apply_completion_delta,
                                                      apply_request_delta, expand)

# fields this module handles itself (the text is ours, token-aligned lists stop with it)
_OWN_FIELDS = ("text", "token_ids", "logprobs", "finish_reason", "stop_reason")


def _copier(cls):
    """``dataclasses.replace`` for a class whose fields are all init fields: one C-level
    read of every field, then the constructor (replace's checks cost 3x that, and the
    routes get two copies per streamed token)."""
    fields = dataclasses.fields(cls)
    if any(not f.init for f in fields):
        return lambda obj, **changes: dataclasses.replace(obj, **changes)
    names = tuple(f.name for f in fields)
    read = operator.attrgetter(*names)

    def copy(obj, **changes):
        new = cls(*read(obj))
        for name, value in changes.items():
            setattr(new, name, value)
        return new
    return copy


_copy_request, _copy_completion = _copier(RequestOutput), _copier(CompletionOutput)


class RequestAssembler:
    def __init__(self, request_id: str, prompt: str | None, prompt_token_ids: list[int],
                 params: SamplingParams, tokenizer):
        self.output = RequestOutput(request_id, prompt, prompt_token_ids, [
            CompletionOutput(index=i, token_ids=[],
                             logprobs=[] if params.logprobs is not None else None)
            for i in range(params.n)])
        self._detokenizers = [
            IncrementalDetokenizer(tokenizer, prompt_token_ids, params)
            if tokenizer is not None and params.detokenize else None
            for _ in range(params.n)]

    def apply(self, delta: list) -> tuple[RequestOutput, list[int]]:
        """Fold one step's delta in: (the cumulative output, indices of sequences that a
        stop string ended here and the core still runs)."""
        delta = expand(delta)
        completions = delta[2]
        apply_request_delta(self.output, delta, skip=("finished",))
        stopped_here = []
        for index, appends, sets in completions:
            comp = self.output.outputs[index]
            if comp.finished:
                continue  # tokens the core made before it heard of our stop string
            apply_completion_delta(comp, appends, sets, skip=_OWN_FIELDS)
            if self._add_tokens(comp, appends or {}, sets or {}):
                stopped_here.append(index)
        self.output.finished = all(c.finished for c in self.output.outputs)
        return self._snapshot(), stopped_here

    def _add_tokens(self, comp: CompletionOutput, appends: dict, sets: dict) -> bool:
        """Append the new tokens, with their text; True if a stop string ended the
        sequence here."""
        new_ids = appends.get("token_ids") or []
        new_logprobs = appends.get("logprobs") or []
        finish_reason = sets.get("finish_reason")
        detok = self._detokenizers[comp.index]
        # EOS and stop token ids end a sequence without adding their text
        num_with_text = len(new_ids) - (finish_reason == "stop"
                                        and not isinstance(sets.get("stop_reason"), str))
        for i, token in enumerate(new_ids):
            comp.token_ids.append(token)
            if comp.logprobs is not None and i < len(new_logprobs):
                comp.logprobs.append(new_logprobs[i])
            if detok is None or i >= num_with_text:
                continue
            comp.text += detok.append(token)
            if detok.is_stopped:
                comp.text = detok.output_text
                comp.finish_reason, comp.stop_reason = "stop", detok.stop_reason
                return True
        if finish_reason is not None:
            if detok is not None:
                comp.text += detok.flush()
            comp.finish_reason, comp.stop_reason = finish_reason, sets.get("stop_reason")
        return False

    def _snapshot(self) -> RequestOutput:
        """What a route may keep: views of the growing lists while they still grow
        (every other field copied as it is, whatever fields the classes have)."""
        out = self.output
        if out.finished:
            return out
        return _copy_request(out, outputs=[
            c if c.finished else _copy_completion(
                c, token_ids=PrefixView(c.token_ids, len(c.token_ids)),
                logprobs=None if c.logprobs is None else PrefixView(c.logprobs,
                                                                    len(c.logprobs)))
            for c in out.outputs])
