"""/v1/completions responses, whole or streamed: one choice per (prompt, sample) with
OpenAI's index ``prompt * n + sample``, ``echo`` (the prompt's text and, with logprobs,
the prompt tokens' logprobs before the generated ones; ``max_tokens: 0`` keeps only
those), and vLLM's ``prompt_logprobs`` / ``return_token_ids`` fields."""
from __future__ import annotations

from kubellm.runtime.core.outputs import CompletionOutput, RequestOutput
from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.server.logprobs_format import LogprobFormatter
from kubellm.runtime.server.prompts import Prompt
from kubellm.runtime.server.protocol_completions import CompletionRequest
from kubellm.runtime.server.responses import ChoiceCursor, envelope, usage

OBJECT = "text_completion"


def prompt_logprobs_json(formatter: LogprobFormatter, entries: list | None) -> list | None:
    """vLLM's prompt_logprobs: per prompt token None or {id: {logprob, decoded_token}}."""
    if entries is None:
        return None
    return [None if e is None else {str(t): {"logprob": lp, "decoded_token": formatter.piece(t)}
                                    for t, lp in e.items()} for e in entries]


class CompletionResponder:
    def __init__(self, tokenizer, body: CompletionRequest, request_id: str, model: str,
                 params: SamplingParams, prompts: list[Prompt]):
        self.tokenizer = tokenizer
        self.body = body
        self.request_id = request_id
        self.model = model
        self.n = params.n
        self.prompts = prompts
        self.echo_only = body.echo_only
        self.formatter = LogprobFormatter(tokenizer, body.logprobs or 0,
                                          body.return_tokens_as_token_ids)
        self.with_logprobs = body.logprobs is not None
        self._cursors: dict[int, ChoiceCursor] = {}
        self._offsets: dict[int, int] = {}
        self._last: list[RequestOutput | None] = [None] * len(prompts)

    # ---- whole -----------------------------------------------------------------------
    def response(self, outs: list[RequestOutput]) -> dict:
        choices = [self._choice(i, out, comp) for i, out in enumerate(outs)
                   for comp in out.outputs]
        choices.sort(key=lambda c: c["index"])
        return envelope(self.request_id, self.model, OBJECT, choices,
                        usage=usage(outs, 0 if self.echo_only else None))

    def _choice(self, i: int, out: RequestOutput, comp: CompletionOutput) -> dict:
        token_ids, entries, text = self._generated(comp)
        prefix = self.prompts[i].echo_text(self.tokenizer) if self.body.echo else ""
        choice = {"index": i * self.n + comp.index, "text": prefix + text,
                  "logprobs": self._logprobs(i, out, token_ids, entries, prefix, True),
                  "finish_reason": "length" if self.echo_only else comp.finish_reason,
                  "stop_reason": comp.stop_reason}
        self._extras(choice, i, out, token_ids, True)
        return choice

    def _generated(self, comp: CompletionOutput):
        if self.echo_only:   # the one token generated is not part of the answer
            return [], [], ""
        return list(comp.token_ids), list(comp.logprobs or []), comp.text

    def _logprobs(self, i, out, token_ids, entries, prefix: str, with_prompt: bool):
        if not self.with_logprobs:
            return None
        generated = self.formatter.completion(token_ids, entries, len(prefix))
        if not (self.body.echo and with_prompt):
            return generated
        prompt = self.formatter.completion(self.prompts[i].token_ids,
                                           out.prompt_logprobs or [], 0)
        return {key: prompt[key] + generated[key] for key in generated}

    def _extras(self, choice: dict, i: int, out: RequestOutput, token_ids, first: bool):
        if self.body.prompt_logprobs is not None and first:
            choice["prompt_logprobs"] = prompt_logprobs_json(self.formatter,
                                                             out.prompt_logprobs)
        if self.body.return_token_ids:
            if first:
                choice["prompt_token_ids"] = list(self.prompts[i].token_ids)
            choice["token_ids"] = list(token_ids)

    # ---- streamed --------------------------------------------------------------------
    def chunks(self, i: int, out: RequestOutput) -> list[dict]:
        """The chunks a new cumulative output of prompt ``i`` adds."""
        self._last[i] = out
        chunks = []
        for comp in out.outputs:
            index = i * self.n + comp.index
            cursor = self._cursors.setdefault(index, ChoiceCursor(index))
            if self.echo_only and not comp.finished:
                continue
            step = cursor.advance(comp)
            if step is None:
                continue
            delta, start, end, finish_reason = step
            token_ids = list(comp.token_ids[start:end])
            entries = list((comp.logprobs or [])[start:end])
            first = not cursor.is_started
            cursor.is_started = True
            if self.echo_only:
                token_ids, entries, delta, finish_reason = [], [], "", "length"
            prefix = self.prompts[i].echo_text(self.tokenizer) if self.body.echo and first \
                else ""
            offset = self._offsets.get(index, 0)
            logprobs = self._logprobs(i, out, token_ids, entries, prefix, first)
            if logprobs is not None and offset:
                logprobs["text_offset"] = [o + offset for o in logprobs["text_offset"]]
            self._offsets[index] = offset + len(prefix) + len(delta)
            choice = {"index": index, "text": prefix + delta, "logprobs": logprobs,
                      "finish_reason": finish_reason,
                      "stop_reason": comp.stop_reason if finish_reason else None}
            self._extras(choice, i, out, token_ids, first)
            chunk = envelope(self.request_id, self.model, OBJECT, [choice])
            if self.body.continuous_usage:
                chunk["usage"] = usage([out], 0 if self.echo_only else len(comp.token_ids))
            chunks.append(chunk)
        return chunks

    def final_chunks(self) -> list[dict]:
        if not self.body.include_usage:
            return []
        outs = [o for o in self._last if o is not None]
        return [envelope(self.request_id, self.model, OBJECT, [],
                         usage=usage(outs, 0 if self.echo_only else None))]
