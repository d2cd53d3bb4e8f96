"""Post-processing: sampled tokens in, RequestOutputs out. Appended tokens are checked
for stop conditions (EOS, stop token ids, stop strings through the incremental
detokenizer, max_tokens, max_model_len), finished sequences go back to the scheduler,
and a user request's n sequences are reported together as one RequestOutput."""
from __future__ import annotations

import time
from dataclasses import dataclass

from kubellm.runtime.core.outputs import CompletionOutput, PrefixView, RequestOutput
from kubellm.runtime.core.request import Request, Status


@dataclass(eq=False)
class Group:
    """A user request: its prompt and its n sequences."""
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    sequences: list[Request]
    texts: list[str]
    arrival_time: float
    # [None, {token: logprob, ...} per later prompt token] when prompt_logprobs was asked
    prompt_logprobs: list | None = None


def _snapshot(items: list, finished: bool):
    """A finished sequence's list as is (nothing appends to it any more); a running
    one's as a view of its current length (no per-step copy)."""
    return items if finished else PrefixView(items, len(items))


def _metrics(seq: Request, group: Group, finished_time: float | None = None) -> dict:
    """A one-sequence request's output metrics. A running output's hold until the request
    is preempted (the scheduler then drops ``seq.output_metrics``) or finishes (the
    finished output gets a dict of its own): the caller keeps them in
    ``seq.output_metrics`` and hands that same dict to every step's output, so a dict
    must never be changed once built."""
    return {"arrival_time": group.arrival_time,
            "first_scheduled_time": seq.first_scheduled_time,
            "first_token_time": seq.first_token_time,
            "finished_time": finished_time, "num_preemptions": seq.num_preemptions}


class OutputProcessor:
    def __init__(self, scheduler, eos_token_ids: set[int], max_model_len: int):
        self.scheduler = scheduler
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        self.groups: dict[str, Group] = {}      # user requests not yet reported finished
        self.generation_tokens_total = 0
        self._delta_encoder = None

    @property
    def delta_encoder(self):
        """Set by a consumer that sends deltas (the engine core: its DeltaEncoder): a hot
        row in the encoder's steady state is then reported as its compact delta (a list,
        what DeltaEncoder.encode would give), not as a RequestOutput built only to be
        compared field by field and dropped."""
        return self._delta_encoder

    @delta_encoder.setter
    def delta_encoder(self, encoder) -> None:
        # the rows' steady deltas hold the old encoder's counts: none carries over
        for group in self.groups.values():
            for seq in group.sequences:
                seq.steady_delta = None
        self._delta_encoder = encoder

    def process(self, progressed: list[Request], logprobs: dict,
                prompt_logprobs: dict | None = None) -> list[RequestOutput | list]:
        """The step's outputs: a RequestOutput per reported request, or, with a
        ``delta_encoder``, a running request's compact delta ``[request id, new token
        ids]`` where that encoder's steady state lets it stand for the output."""
        now = time.monotonic()
        if prompt_logprobs:
            self._add_prompt_logprobs(prompt_logprobs)
        self.generation_tokens_total += len(progressed)
        # in the order each request was first touched; a request of n > 1 sequences
        # holds its place (None) until the loop is over, as a later row may carry another
        # of its sequences: ``deferred`` has its place
        outputs: list = []
        deferred: dict[Group, int] = {}
        groups, eos, max_len = self.groups, self.eos_token_ids, self.max_model_len
        new = object.__new__        # the hot row's constructor (below)
        # the delta encoder's per-request states, read and advanced in the loop (a method
        # call per row cost as much as the objects it saves)
        sent_of = self._delta_encoder.sent_states.get if self._delta_encoder else None
        for seq in progressed:
            steady = seq.steady_delta
            if steady is not None:
                # a row that went out as a compact delta last time it landed, with the
                # same metrics dict (none since: a preemption drops it): only its new
                # token can stop it, by EOS or by length. A finished or aborted row
                # never gets here (on_result drops it), so its group needs no look-up
                metrics, request_id, tokens, counts, limit, checks_eos = steady
                if metrics is seq.output_metrics and len(tokens) < limit \
                        and not (checks_eos and tokens[-1] in eos):
                    num_sent = counts.get("token_ids", 0)
                    counts["token_ids"] = len(tokens)
                    outputs.append([request_id, tokens[num_sent:]])
                    continue
                seq.steady_delta = None
            if seq.first_token_time is None:
                seq.first_token_time = now
            if seq.logprobs is not None:
                seq.logprobs.append(logprobs.get(seq.request_id) or {})
            group = seq.group
            if groups.get(group.request_id) is not group:
                continue  # aborted
            params = seq.params
            # the common case, decided here without a call: no text to follow, no stop
            # token ids, not an EOS that counts, below both length limits
            if seq.detokenizer is None and not params.stop_token_ids \
                    and (params.ignore_eos or seq.output_token_ids[-1] not in eos) \
                    and len(seq.output_token_ids) < seq.max_tokens \
                    and len(seq.all_token_ids) < max_len:
                if params.output_kind != "cumulative":
                    continue
                if len(group.sequences) == 1:   # the hot row: _make_single_output, inlined
                    tokens, lps = seq.output_token_ids, seq.logprobs
                    metrics = seq.output_metrics
                    if metrics is None:
                        metrics = seq.output_metrics = _metrics(seq, group)
                    if sent_of is not None and lps is None and not group.texts[0] \
                            and group.prompt_logprobs is None:
                        sent = sent_of(group.request_id)
                        if sent is not None and sent.steady_metrics is metrics \
                                and sent.steady_cached == seq.num_cached_tokens:
                            counts = sent.counts[0]
                            num_sent = counts.get("token_ids", 0)
                            if len(tokens) > num_sent:
                                counts["token_ids"] = len(tokens)
                            # output_delta's compact form: [request id, new token ids]
                            outputs.append([group.request_id, tokens[num_sent:]])
                            # the lengths of both lists grow together: the model-length
                            # limit counted in output tokens
                            seq.steady_delta = (
                                metrics, group.request_id, tokens, counts,
                                min(seq.max_tokens,
                                    max_len - len(seq.all_token_ids) + len(tokens)),
                                not params.ignore_eos)
                            continue
                    # the output, its completion and its token view built field by
                    # field on object.__new__, not through their __init__ (a Python
                    # call through type(): ~70 ns more per object on this CPU, three
                    # per row); every field is set (a field added to either dataclass
                    # fails test_streamed_running_row_is_the_output_make_output_gives)
                    completion = new(CompletionOutput)
                    completion.index = 0
                    completion.text = group.texts[0]
                    view = new(PrefixView)    # PrefixView(tokens, len(tokens)), as above
                    view._items, view._length = tokens, len(tokens)
                    completion.token_ids = view
                    completion.finish_reason = completion.stop_reason = None
                    completion.logprobs = None if lps is None else PrefixView(lps, len(lps))
                    out = new(RequestOutput)
                    out.request_id = group.request_id
                    out.prompt = group.prompt
                    out.prompt_token_ids = group.prompt_token_ids
                    out.outputs = [completion]
                    out.finished = False
                    out.num_cached_tokens = seq.num_cached_tokens
                    out.prompt_logprobs = group.prompt_logprobs
                    out.metrics = metrics
                    outputs.append(out)
                    continue
            else:
                self._advance_text(seq, group, seq.index)
                if not seq.is_finished and params.output_kind != "cumulative":
                    continue
            if len(group.sequences) == 1:   # nothing later in the step changes it
                outputs.append(self._make_single_output(group))
            elif group not in deferred:
                deferred[group] = len(outputs)
                outputs.append(None)
        for group, i in deferred.items():
            if group.sequences[0].params.output_kind == "cumulative" \
                    or all(s.is_finished for s in group.sequences):
                outputs[i] = self._make_output(group)
        return [o for o in outputs if o is not None] if deferred else outputs

    def _add_prompt_logprobs(self, prompt_logprobs: dict) -> None:
        """Append a prefill chunk's prompt logprobs to its request's list. A request
        preempted and prefilled again reports positions it already has: skip those."""
        for request_id, (first, entries) in prompt_logprobs.items():
            seq = self.scheduler.get(request_id)
            if seq is None or seq.group.prompt_logprobs is None:
                continue  # finished or aborted meanwhile
            have = seq.group.prompt_logprobs
            if first <= len(have) < first + len(entries):
                have.extend(entries[len(have) - first:])

    def _advance_text(self, seq: Request, group: Group, index: int) -> None:
        token = seq.output_token_ids[-1]
        params = seq.params
        reason, stop = None, None
        min_reached = seq.num_output_tokens >= params.min_tokens
        if token in self.eos_token_ids and not params.ignore_eos and min_reached:
            reason = "stop"
        elif token in params.stop_token_ids and min_reached:
            reason, stop = "stop", token
        else:
            detok = seq.detokenizer
            if detok is not None:
                group.texts[index] += detok.append(token)
            if detok is not None and detok.is_stopped:
                reason, stop = "stop", detok.stop_reason
                group.texts[index] = detok.output_text
            elif (seq.num_output_tokens >= seq.max_tokens
                  or seq.num_tokens >= self.max_model_len):
                reason = "length"
        if reason is not None:
            if seq.detokenizer is not None and not isinstance(stop, str):
                group.texts[index] += seq.detokenizer.flush()
            self.scheduler.finish_request(seq, reason, stop)

    def _make_output(self, group: Group) -> RequestOutput:
        if len(group.sequences) == 1:
            return self._make_single_output(group)
        completions = [
            CompletionOutput(index=i, text=group.texts[i],
                             token_ids=_snapshot(seq.output_token_ids, seq.is_finished),
                             finish_reason=seq.finish_reason, stop_reason=seq.stop_reason,
                             logprobs=None if seq.logprobs is None
                             else _snapshot(seq.logprobs, seq.is_finished))
            for i, seq in enumerate(group.sequences)]
        finished = all(seq.is_finished for seq in group.sequences)
        if finished:
            self.groups.pop(group.request_id, None)
        seqs = group.sequences
        if len(seqs) == 1:
            first, scheduled = seqs[0].first_token_time, seqs[0].first_scheduled_time
        else:
            first = min((s.first_token_time for s in seqs if s.first_token_time), default=None)
            scheduled = min((s.first_scheduled_time for s in seqs if s.first_scheduled_time),
                            default=None)
        return RequestOutput(
            request_id=group.request_id, prompt=group.prompt,
            prompt_token_ids=group.prompt_token_ids, outputs=completions, finished=finished,
            num_cached_tokens=group.sequences[0].num_cached_tokens,
            prompt_logprobs=group.prompt_logprobs,
            metrics={"arrival_time": group.arrival_time, "first_scheduled_time": scheduled,
                     "first_token_time": first,
                     "finished_time": time.monotonic() if finished else None,
                     "num_preemptions": sum(s.num_preemptions for s in group.sequences)})

    def _make_single_output(self, group: Group) -> RequestOutput:
        """``_make_output`` for the common n == 1: no per-sequence generators (a running
        row of the common case, streamed, is built in ``process``'s loop instead)."""
        seq = group.sequences[0]
        finished = seq.status is Status.FINISHED
        if finished:
            self.groups.pop(group.request_id, None)
        logprobs = seq.logprobs
        # positional arguments, in the fields' order: a dataclass takes keywords at twice
        # the cost (~0.25 us more per object on this CPU, 256 rows a step)
        completion = CompletionOutput(
            0, group.texts[0],                                    # index, text
            seq.output_token_ids if finished else                 # token_ids
            PrefixView(seq.output_token_ids, len(seq.output_token_ids)),
            seq.finish_reason, seq.stop_reason,
            logprobs if logprobs is None or finished else PrefixView(logprobs, len(logprobs)))
        if finished:
            metrics = _metrics(seq, group, time.monotonic())
        else:
            metrics = seq.output_metrics
            if metrics is None:
                metrics = seq.output_metrics = _metrics(seq, group)
        return RequestOutput(
            group.request_id, group.prompt, group.prompt_token_ids, [completion], finished,
            seq.num_cached_tokens, group.prompt_logprobs, metrics)
