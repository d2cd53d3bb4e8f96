"""A RequestOutput as a delta: only what changed since the front end last heard of it.

Engine outputs are cumulative (all tokens so far); sending them whole every step would
cost O(tokens) per step. The core sends, per request and step,
``[request_id, request_sets, [[index, appends, sets], ...]]`` (plus ``request_appends``
when a request-level list grew): the new tail of every sequence-valued field of a
CompletionOutput (token ids, logprobs, text) and of the request (prompt_logprobs), the
new value of every other field that changed. Fields are
read from the dataclasses themselves, so a field added to either class travels without
a change here; the prompt is not sent back (the front end sent it).

A running one-sequence request's step usually changes only its token ids: that delta
travels compact, as ``[request_id, new token ids]`` (two items; ``expand`` gives the
full form it stands for), four containers fewer per row to build, send and read.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kubellm.runtime.core.outputs import CompletionOutput, RequestOutput

_NOT_SENT_BACK = ("request_id", "prompt", "prompt_token_ids", "outputs")
REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(RequestOutput)
                       if f.name not in _NOT_SENT_BACK)
COMPLETION_FIELDS = tuple(f.name for f in dataclasses.fields(CompletionOutput)
                          if f.name != "index")
# text fields (default "") grow; other strings (finish_reason) are set once
_GROWING_TEXT = frozenset(f.name for f in dataclasses.fields(CompletionOutput)
                          if f.default == "")
_UNSET = object()


def _grows(name: str, value) -> bool:
    """Sequence-valued fields only ever grow while a request runs: send their tail."""
    if isinstance(value, str):
        return name in _GROWING_TEXT
    return isinstance(value, Sequence)


def _may_grow(cls, name: str) -> bool:
    """Whether a field can hold a growing value (text, a list, a sequence view), from its
    declared type: the others are compared and set, never tested per value."""
    annotation = str(next(f.type for f in dataclasses.fields(cls) if f.name == name))
    return name in _GROWING_TEXT or any(word in annotation for word in ("Sequence", "list"))


# (name, may grow) per field, decided once: encode runs for every running request on
# every step, and an isinstance against the Sequence ABC for each field was most of it
_REQUEST_PLAN = tuple((name, _may_grow(RequestOutput, name)) for name in REQUEST_FIELDS)
_COMPLETION_PLAN = tuple((name, _may_grow(CompletionOutput, name))
                         for name in COMPLETION_FIELDS)


# The decode step of a plain request (one sequence, no logprobs, no text: the core never
# detokenizes) changes only its token ids: ``encode`` takes a short path for it, which
# holds only while the classes have exactly these fields (else every output goes the
# general way, so a new field still travels)
_SHORT_PATH = (REQUEST_FIELDS == ("finished", "num_cached_tokens", "prompt_logprobs", "metrics")
               and COMPLETION_FIELDS == ("text", "token_ids", "finish_reason", "stop_reason",
                                         "logprobs"))


class _Sent:
    __slots__ = ("request", "request_counts", "counts", "values", "steady_metrics",
                 "steady_cached")

    def __init__(self, num_completions: int):
        self.request: dict = {}
        self.request_counts: dict = {}     # request-level sequence field -> length sent
        self.counts = [dict() for _ in range(num_completions)]  # sequence field -> length
        self.values = [dict() for _ in range(num_completions)]  # other field -> value
        # set while what was sent leaves only token ids to grow (a running one-sequence
        # request: no text, logprobs or reasons): the metrics dict and cached-token count
        # sent. The output processor's hot row compares them and, where they hold, makes
        # the compact delta itself (what _token_ids_only gives) without an output built
        self.steady_metrics = None
        self.steady_cached = -1


class DeltaEncoder:
    """Core side: remembers, per request, what has been sent."""

    def __init__(self):
        self._sent: dict[str, _Sent] = {}
        # read (and each state's token count advanced) by OutputProcessor's hot row
        self.sent_states = self._sent

    def encode(self, out: RequestOutput) -> list:
        sent = self._sent.get(out.request_id)
        if sent is not None and _SHORT_PATH and not out.finished and len(out.outputs) == 1:
            delta = _token_ids_only(out, sent)
            if delta is not None:
                if sent.steady_metrics is None:
                    _mark_steady(out, sent)
                return delta
        delta = self._encode_general(out, sent)
        if not out.finished:
            _mark_steady(out, self._sent[out.request_id])
        return delta

    def _encode_general(self, out: RequestOutput, sent: "_Sent | None") -> list:
        if sent is None:
            sent = self._sent[out.request_id] = _Sent(len(out.outputs))
        request_sets, request_appends = {}, {}
        for name, may_grow in _REQUEST_PLAN:
            value = getattr(out, name)
            if may_grow and value is not None and _grows(name, value):
                # a list the engine extends in place (prompt_logprobs)
                num_sent = sent.request_counts.get(name, 0)
                if len(value) > num_sent:
                    request_appends[name] = value[num_sent:]
                    sent.request_counts[name] = len(value)
            elif sent.request.get(name, _UNSET) != value:
                request_sets[name] = sent.request[name] = value
        completions = []
        for comp in out.outputs:
            counts, values = sent.counts[comp.index], sent.values[comp.index]
            appends, sets = {}, {}
            for name, may_grow in _COMPLETION_PLAN:
                value = getattr(comp, name)
                if may_grow and value is not None:
                    # (a growing field's value is a str, list or view: no ABC check)
                    num_sent = counts.get(name, 0)
                    if len(value) > num_sent:
                        appends[name] = value[num_sent:]
                        counts[name] = len(value)
                elif values.get(name, _UNSET) != value:
                    sets[name] = values[name] = value
            if appends or sets:
                completions.append([comp.index, appends or None, sets or None])
        if out.finished:
            del self._sent[out.request_id]
        if request_appends:
            return [out.request_id, request_sets or None, completions, request_appends]
        return [out.request_id, request_sets or None, completions]

    def has_sent(self, request_id: str) -> bool:
        return request_id in self._sent

    def forget(self, request_id: str) -> None:
        self._sent.pop(request_id, None)


def _mark_steady(out: RequestOutput, sent: _Sent) -> None:
    """After ``out``'s delta: whether what was sent leaves only token ids to grow, kept as
    the metrics dict and the cached-token count that the output processor's hot row
    compares."""
    sent.steady_metrics, sent.steady_cached = None, -1
    if _SHORT_PATH and not out.finished and len(out.outputs) == 1 \
            and out.metrics is not None and _only_token_ids_differ(out, sent):
        sent.steady_metrics, sent.steady_cached = out.metrics, out.num_cached_tokens


def _only_token_ids_differ(out: RequestOutput, sent: _Sent) -> bool:
    """A one-sequence ``out`` with no text, logprobs or reasons, whose request-level
    fields are what was last sent for it: only its token ids can differ."""
    comp = out.outputs[0]
    if comp.index or comp.text or comp.logprobs is not None \
            or comp.finish_reason is not None or comp.stop_reason is not None \
            or out.prompt_logprobs is not None:
        return False
    request, values = sent.request, sent.values[0]
    if request.get("finished", _UNSET) is not False \
            or request.get("prompt_logprobs", _UNSET) is not None \
            or values.get("finish_reason", _UNSET) is not None \
            or values.get("stop_reason", _UNSET) is not None \
            or values.get("logprobs", _UNSET) is not None \
            or request.get("num_cached_tokens", _UNSET) != out.num_cached_tokens:
        return False
    metrics = request.get("metrics", _UNSET)
    # a running request's outputs share one metrics dict (output_processor.py): the same
    # object needs no comparison of its five values
    return metrics is out.metrics or metrics == out.metrics


def _token_ids_only(out: RequestOutput, sent: _Sent) -> list | None:
    """``encode``'s delta, compact, when only token ids grew since the last one (what
    the general path would send, in its short form), else None."""
    if not _only_token_ids_differ(out, sent):
        return None
    counts, token_ids = sent.counts[0], out.outputs[0].token_ids
    num_sent = counts.get("token_ids", 0)
    counts["token_ids"] = max(num_sent, len(token_ids))
    return [out.request_id, token_ids[num_sent:]]


def expand(delta: list) -> list:
    """A delta in its full form: the compact ``[request_id, new token ids]`` as the
    general form it stands for; any other delta as it is."""
    if len(delta) != 2:
        return delta
    request_id, token_ids = delta
    return [request_id, None, [[0, {"token_ids": token_ids}, None]] if token_ids else []]


def apply_request_delta(target: RequestOutput, delta: list, skip=()) -> None:
    """Front end side: the request-level part of one delta (sets, and list tails)."""
    for name, value in (delta[1] or {}).items():
        if name not in skip:
            setattr(target, name, value)
    for name, tail in (delta[3] if len(delta) > 3 else {}).items():
        current = getattr(target, name)
        if isinstance(current, list):
            current.extend(tail)
        else:
            setattr(target, name, list(tail))


def apply_completion_delta(comp: CompletionOutput, appends: dict | None, sets: dict | None,
                           skip=()) -> None:
    """Front end side: grow and set ``comp``'s fields as the core's delta says (fields in
    ``skip`` are the caller's to handle)."""
    for name, tail in (appends or {}).items():
        if name in skip:
            continue
        current = getattr(comp, name)
        if isinstance(tail, str):
            setattr(comp, name, (current or "") + tail)
        elif isinstance(current, list):
            current.extend(tail)
        else:
            setattr(comp, name, list(tail))
    for name, value in (sets or {}).items():
        if name not in skip:
            setattr(comp, name, value)
