"""Offline API as vLLM users write it: ``LLM(model=...).generate(prompts, sampling_params)``
and ``LLM.chat(messages, sampling_params, tools=...)``.

A prompt is text, a list of token ids, or a dict with ``prompt`` or ``prompt_token_ids``.
Every request of a call is checked (prompt, parameters, grammar) before the first one is
queued, so a bad one fails the call with nothing run.

``with LLM(...) as llm:`` or ``llm.shutdown()`` ends the engine at a known point (its
worker processes, process groups and device memory); dropping the last reference to it,
or the interpreter's exit, does the same.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from tqdm import tqdm

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.core.sampling_params import ParameterError, SamplingParams
from kubellm.runtime.engine.chat import load_chat_template, render_chat
from kubellm.runtime.engine.llm_engine import LLMEngine, TokenizedPrompt

Prompt = str | list[int] | Mapping


class LLM:
    def __init__(self, model: str | None = None, *, config: EngineConfig | None = None,
                 **engine_fields):
        """``engine_fields`` are EngineConfig fields (they rank above KUBELLM_* env);
        or pass a ready ``config``."""
        if config is None:
            config = EngineConfig.from_sources(model=model, **engine_fields)
        self.engine = LLMEngine.from_config(config)
        self._ids = itertools.count()

    def shutdown(self) -> None:
        """Stop the engine and free what it holds (LLMEngine.shutdown); idempotent."""
        self.engine.shutdown()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def get_tokenizer(self):
        return self.engine.tokenizer

    def reset_prefix_cache(self) -> bool:
        """Drop the prefix cache (vLLM's): later prompts find nothing cached. False, with
        nothing dropped, while requests are unfinished."""
        return self.engine.kv.reset_prefix_cache()

    def get_default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the model's generation_config.json defaults (vLLM's)."""
        return SamplingParams(**self.engine.generation_defaults)

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = False, priority: Sequence[int] | None = None, *,
                 params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        """One RequestOutput per prompt, in order. ``params`` is an older name of
        ``sampling_params``."""
        if params is not None:
            if sampling_params is not None:
                raise TypeError("give sampling_params or params, not both")
            sampling_params = params
        if isinstance(prompts, (str, Mapping)) or (
                isinstance(prompts, Sequence) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = [self._engine_prompt(p, i) for i, p in enumerate(prompts)]
        return self._run(prompts, sampling_params, priority, use_tqdm)

    def chat(self, messages: Sequence[dict] | Sequence[Sequence[dict]],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
             use_tqdm: bool = False, *, chat_template: str | None = None,
             add_generation_prompt: bool = True, continue_final_message: bool = False,
             tools: list[dict] | None = None, chat_template_kwargs: dict | None = None
             ) -> list[RequestOutput]:
        """Generate replies to one conversation (a list of messages) or several (a list of
        such lists), rendered by the model's chat template (or ``chat_template``: a
        template or a file's path)."""
        if self.engine.tokenizer is None:
            raise ValueError("chat() needs a tokenizer (the engine has skip_tokenizer_init)")
        conversations = [messages] if messages and isinstance(messages[0], Mapping) \
            else list(messages)
        template = load_chat_template(chat_template)
        prompts = []
        for conversation in conversations:
            text = render_chat(self.engine.tokenizer, list(conversation),
                               chat_template=template, tools=tools,
                               add_generation_prompt=add_generation_prompt,
                               continue_final_message=continue_final_message,
                               chat_template_kwargs=chat_template_kwargs)
            # the template holds BOS where the model wants one: add no special tokens
            ids = self.engine.tokenizer.encode(text, add_special_tokens=False)
            prompts.append(TokenizedPrompt(text, ids))
        return self._run(prompts, sampling_params, None, use_tqdm)

    # ---- helpers -------------------------------------------------------------------
    def _engine_prompt(self, prompt: Prompt, index: int):
        if isinstance(prompt, Mapping):
            unknown = set(prompt) - {"prompt", "prompt_token_ids"}
            if unknown:
                raise ParameterError(f"prompts[{index}]", f"unsupported key(s) "
                                                          f"{sorted(unknown)}")
            if "prompt_token_ids" in prompt:
                ids = prompt["prompt_token_ids"]
                text = prompt.get("prompt")
                return TokenizedPrompt(text, list(ids)) if isinstance(text, str) else list(ids)
            if "prompt" in prompt:
                return prompt["prompt"]
            raise ParameterError(f"prompts[{index}]", "needs 'prompt' or 'prompt_token_ids'")
        return prompt

    def _run(self, prompts: list, sampling_params, priority, use_tqdm) -> list[RequestOutput]:
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"{len(sampling_params)} SamplingParams for {len(prompts)} "
                             "prompts: give one, or one per prompt")
        if priority is not None and len(priority) != len(prompts):
            raise ValueError(f"{len(priority)} priorities for {len(prompts)} prompts: give "
                             "one per prompt")
        # check everything before queuing anything: a bad request leaves the engine clean
        prepared = [self.engine.prepare_request(
            str(next(self._ids)), prompt, p.clone(output_kind="final_only"),
            priority[i] if priority is not None else 0)
            for i, (prompt, p) in enumerate(zip(prompts, sampling_params))]
        for group in prepared:
            self.engine.enqueue(group)
        ids = [g.request_id for g in prepared]
        finished: dict[str, RequestOutput] = {}
        bar = tqdm(total=len(ids), desc="generate", disable=not use_tqdm)
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.finished:
                    finished[out.request_id] = out
                    bar.update(1)
        bar.close()
        return [finished[i] for i in ids]
