"""LLMEngine: requests in, RequestOutputs out, one ``step()`` at a time.

A step is three calls: the scheduler picks tokens to compute, the model runner computes
them and samples, post-processing (output_processor.py) appends tokens, detokenizes and
checks stop conditions. With async scheduling (the default) the engine runs one step
ahead: it launches step N+1 before it post-processes step N. A request with ``n > 1``
runs as n sequences (ids ``<id>#<i>``) and is reported as one RequestOutput.

Shutting down, and an engine that died: engine/lifecycle.py.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.core.output_processor import Group, OutputProcessor
from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.core.request import Request
from kubellm.runtime.core.sampling_params import ParameterError, SamplingParams
from kubellm.runtime.core.scheduler import Scheduler, SchedulerOutput
from kubellm.runtime.engine.lifecycle import EngineLifecycle
from kubellm.runtime.engine.request_checks import (PromptTooLongError, check_params,
                                                   check_prompt)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TokenizedPrompt:
    """A text prompt with its token ids, for a caller that tokenized it already (the
    server does, to check lengths before admitting): the engine keeps the text for the
    outputs and does not encode it again on its own thread."""
    text: str
    token_ids: list[int]


@dataclass
class EngineStats:
    num_waiting: int
    num_running: int
    kv_cache_usage: float
    num_free_blocks: int
    num_total_blocks: int
    num_preemptions_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    prefix_cache_queries_total: int
    prefix_cache_hits_total: int
    # tokens per step: (bucket bounds, cumulative counts incl. +Inf, sum)
    iteration_tokens: tuple | None = None


class LLMEngine(EngineLifecycle):
    def __init__(self, config: EngineConfig, tokenizer, executor, kv, scheduler: Scheduler,
                 eos_token_ids: set[int], model_name: str, model_dir: str):
        self.config = config
        self.model_dir = model_dir
        self.tokenizer = tokenizer
        self.executor = executor
        self.kv = kv
        self.scheduler = scheduler
        self.eos_token_ids = eos_token_ids
        self.model_name = model_name
        self.output = OutputProcessor(scheduler, eos_token_ids, config.max_model_len)
        self.prompt_tokens_total = 0
        # host-side time per phase, summed over steps (the GPU benchmark reports them);
        # wait_s is time spent blocked on the device, not host work
        self.timings = {"schedule_s": 0.0, "execute_s": 0.0, "postprocess_s": 0.0,
                        "wait_s": 0.0, "steps": 0}
        # async scheduling: the step launched last, its samples not yet on the host
        self.run_ahead = config.async_scheduling and hasattr(executor, "launch")
        self._in_flight: tuple[SchedulerOutput, object] | None = None
        self._last_tables: list[list[int]] | None = None   # the last step's (_block_tables)
        # structured outputs: xgrammar is imported and the vocabulary prepared on first use
        from kubellm.runtime.worker.grammar import LazyGrammarCompiler
        self.grammar = LazyGrammarCompiler(tokenizer, executor.vocab_size, eos_token_ids)
        # sampling defaults from generation_config.json (--generation-config)
        from kubellm.runtime.engine.generation_defaults import load_generation_defaults
        self.generation_defaults = load_generation_defaults(config.generation_config,
                                                            model_dir)
        self._init_lifecycle(executor)

    @classmethod
    def from_config(cls, config: EngineConfig) -> "LLMEngine":
        from kubellm.runtime.engine.builder import build_engine
        return build_engine(cls, config)

    # ---- requests ------------------------------------------------------------------
    def add_request(self, request_id: str, prompt: str | list[int] | TokenizedPrompt,
                    params: SamplingParams, priority: int = 0) -> None:
        """Queue a request, or raise (ParameterError, PromptTooLongError, ValueError,
        EngineDeadError) having queued nothing."""
        self.enqueue(self.prepare_request(request_id, prompt, params, priority))

    def prepare_request(self, request_id: str, prompt: str | list[int] | TokenizedPrompt,
                        params: SamplingParams, priority: int = 0) -> Group:
        """Every check and all per-sequence state of a request, without queuing it: a
        caller with several requests prepares them all before it queues any."""
        if self.errored:
            raise self.dead_error
        if request_id in self.output.groups:
            raise ValueError(f"request id {request_id!r} is already in use")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ParameterError("priority", f"must be an integer, got {priority!r}")
        text, token_ids = self.tokenize_prompt(prompt)
        if params.truncate_prompt_tokens is not None:
            token_ids = token_ids[-params.truncate_prompt_tokens:]
        self._check_prompt(token_ids, params)
        self.check_params(params)
        grammar = None
        if params.structured_outputs is not None:
            grammar = self.grammar.get().compile(params.structured_outputs)
        max_len = self.config.max_model_len
        max_tokens = min(params.max_tokens or max_len, max_len - len(token_ids))
        now = time.monotonic()
        sequences = []
        for i in range(params.n):
            seq = Request(f"{request_id}#{i}", token_ids, params, priority, now,
                          max_tokens=max_tokens, index=i)
            seq.sampling_state = self._make_sampling_state(seq, i, grammar)
            if params.detokenize and self.tokenizer is not None:
                seq.detokenizer = self._make_detokenizer(token_ids, params)
            seq.logprobs = [] if params.logprobs is not None else None
            sequences.append(seq)
        group = Group(request_id, text, token_ids, sequences, [""] * params.n, now,
                      prompt_logprobs=None if params.prompt_logprobs is None else [None])
        for seq in sequences:
            seq.group = group
        return group

    def enqueue(self, group: Group) -> None:
        """Queue a prepared request (cannot fail)."""
        if group.request_id in self.output.groups:
            raise ValueError(f"request id {group.request_id!r} is already in use")
        self.output.groups[group.request_id] = group
        for seq in group.sequences:
            self.scheduler.add_request(seq)
        self.prompt_tokens_total += len(group.prompt_token_ids) * len(group.sequences)

    def abort_request(self, request_id: str) -> None:
        group = self.output.groups.pop(request_id, None)
        if group is None:
            return
        for seq in group.sequences:
            self.scheduler.finish_request(seq, "abort")

    def finish_sequence(self, request_id: str, index: int, reason: str = "stop") -> None:
        """End one of a request's n sequences early (the server found a stop string in
        its text); the request ends with its last sequence."""
        group = self.output.groups.get(request_id)
        if group is None:
            return
        seq = group.sequences[index]
        if not seq.is_finished:
            self.scheduler.finish_request(seq, reason)
        if all(s.is_finished for s in group.sequences):
            self.output.groups.pop(request_id, None)

    def has_request(self, request_id: str) -> bool:
        return request_id in self.output.groups

    @property
    def vocab_size(self) -> int:
        return self.executor.vocab_size

    def has_unfinished_requests(self) -> bool:
        return bool(self.output.groups)

    def set_async_scheduling(self, enabled: bool) -> list[RequestOutput]:
        """Switch run-ahead on or off between steps (benchmarks compare both on one
        engine). Lands a step still in flight first; returns its outputs."""
        outputs = self._land(self._in_flight) if self._in_flight is not None else []
        self._in_flight = None
        self.run_ahead = enabled and hasattr(self.executor, "launch")
        return outputs

    # ---- one step ------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        if self.errored:
            raise self.dead_error
        if self.run_ahead:
            return self._step_ahead()
        t0 = time.perf_counter()
        out = self.scheduler.schedule()
        if out.is_empty:
            return []
        tables = self._block_tables(out)
        t1 = time.perf_counter()
        sampled, logprobs, prompt_logprobs = self.executor.execute(out, tables)
        t2 = time.perf_counter()
        progressed = self.scheduler.update(out, sampled)
        outputs = self.output.process(progressed, logprobs, prompt_logprobs)
        t = self.timings
        t["schedule_s"] += t1 - t0
        t["execute_s"] += t2 - t1
        t["postprocess_s"] += time.perf_counter() - t2
        t["steps"] += 1
        return outputs

    def _step_ahead(self) -> list[RequestOutput]:
        """Async scheduling: plan and launch step N+1 while step N still runs on the
        device, then take in step N's samples. The device never waits for the host's
        scheduling, input preparation or post-processing, only for the step before.

        Step N+1 is planned with step N's samples as placeholders (each sampling request
        one token longer); their ids reach step N+1's inputs on the device. A request
        that step N stops has computed one token too many in step N+1, which is dropped.
        Blocks freed here may be handed out to step N+2 at once: the device runs steps
        in order, so step N+1 is done with them before step N+2 writes them."""
        t = self.timings
        t0 = time.perf_counter()
        outputs: list[RequestOutput] = []
        out = self.scheduler.schedule()
        t1 = time.perf_counter()
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None and self.scheduler.num_reading_outputs \
                and self._needs_landed_tokens(out):
            outputs = self._land(in_flight)
            in_flight = None
            out.scheduled = [s for s in out.scheduled if not s.request.is_finished]
        t2 = time.perf_counter()
        tabled = launched = t2
        if not out.is_empty:
            tables = self._block_tables(out)
            tabled = time.perf_counter()
            handle = self.executor.launch(out, tables, in_flight[1] if in_flight else None)
            launched = time.perf_counter()
            self.scheduler.on_launch(out)
            self._in_flight = (out, handle)
            t["steps"] += 1
        t3 = time.perf_counter()
        if in_flight is not None:
            outputs = self._land(in_flight)
        # the block tables' list and on_launch are the scheduler's part of the launch
        # (the executor counts its own host work, the inputs: host_time_s)
        t["schedule_s"] += (t1 - t0) + (tabled - t2) + (t3 - launched)
        t["execute_s"] += launched - tabled
        t["postprocess_s"] += (t2 - t1) + (time.perf_counter() - t3)
        return outputs

    def _land(self, in_flight) -> list[RequestOutput]:
        """Wait for a launched step's samples and post-process them."""
        out, handle = in_flight
        t0 = time.perf_counter()
        sampled, logprobs, prompt_logprobs = handle.result()
        waited = time.perf_counter() - t0
        self.timings["wait_s"] += waited
        self.timings["postprocess_s"] -= waited   # the caller counts the whole landing
        return self.output.process(self.scheduler.on_result(out, sampled), logprobs,
                                   prompt_logprobs)

    def _block_tables(self, out: SchedulerOutput) -> list[list[int]]:
        """The step's block tables, row for row. The very list of the step before when the
        scheduler says the rows are its rows (``same_rows``; the KV manager grows each
        table in place): no list built, and when none grew (``same_tables``) the model
        runner takes its matrix as it is (BlockTableArray.build)."""
        if out.same_rows and self._last_tables is not None:
            return self._last_tables
        self._last_tables = [self.kv.block_table(r.request_id) for r in out.requests]
        return self._last_tables

    @staticmethod
    def _needs_landed_tokens(out: SchedulerOutput) -> bool:
        """Penalties and min_tokens read a request's output tokens on the host: such a
        request cannot be sampled while its previous token is still in flight."""
        return any(samples and r.num_pending_tokens and r.params.reads_output_tokens
                   for r, samples in zip(out.requests, out.samples))

    # ---- helpers -------------------------------------------------------------------
    def tokenize_prompt(self, prompt) -> tuple[str | None, list[int]]:
        """(text or None, token ids) of a text, token-id or pre-tokenized prompt."""
        if isinstance(prompt, TokenizedPrompt):
            return prompt.text, [int(t) for t in prompt.token_ids]
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("this engine has no tokenizer (skip_tokenizer_init): "
                                 "give the prompt as token ids")
            return prompt, self.tokenizer.encode(prompt)
        if isinstance(prompt, (list, tuple)) and _all_token_ids(prompt):
            return None, list(prompt)
        raise ParameterError("prompt", "must be a string, a list of token ids or a "
                                       f"TokenizedPrompt, got {type(prompt).__name__}")

    def check_params(self, params: SamplingParams) -> None:
        """What only the engine knows: the logprob limit, its vocabulary, its layout."""
        check_params(params, self.config, self.vocab_size)

    def _check_prompt(self, token_ids: list[int], params: SamplingParams) -> None:
        check_prompt(token_ids, self.config.max_model_len, self.vocab_size)

    def _make_sampling_state(self, seq: Request, index: int, grammar=None):
        from kubellm.runtime.worker.logits_constraints import LogitsConstraints
        from kubellm.runtime.worker.sampler import SamplingState
        device = self.executor.device
        matcher = self.grammar.get().matcher(grammar) if grammar is not None else None
        constraints = LogitsConstraints.create(seq.params, self.vocab_size, device, matcher)
        state = SamplingState.create(seq.params, seq.prompt_token_ids, index, device,
                                     constraints)
        state.output_token_ids = seq.output_token_ids  # shared: the sampler sees new tokens
        return state

    def _make_detokenizer(self, token_ids, params):
        from kubellm.runtime.core.detokenizer import IncrementalDetokenizer
        return IncrementalDetokenizer(self.tokenizer, token_ids, params)

    def get_stats(self) -> EngineStats:
        return EngineStats(
            num_waiting=len(self.scheduler.waiting), num_running=len(self.scheduler.running),
            kv_cache_usage=self.kv.usage, num_free_blocks=self.kv.num_free_blocks,
            num_total_blocks=self.kv.num_blocks,
            num_preemptions_total=self.scheduler.num_preemptions,
            prompt_tokens_total=self.prompt_tokens_total,
            generation_tokens_total=self.output.generation_tokens_total,
            prefix_cache_queries_total=self.kv.prefix_queries,
            prefix_cache_hits_total=self.kv.prefix_hits,
            iteration_tokens=self.scheduler.iteration_tokens.snapshot())


def _all_token_ids(values) -> bool:
    """Every value an int and none a bool. The set of their types answers the common case
    at C speed (7 us for 512 ids against 42 us for the isinstance loop, which the engine
    core paid for every request it took in while a burst of them waited)."""
    if set(map(type, values)) <= {int}:
        return True
    return all(isinstance(t, int) and not isinstance(t, bool) for t in values)
