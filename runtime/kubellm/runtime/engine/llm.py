"""Offline API: ``LLM(model=...).generate(prompts, params)`` (vLLM's shape).

``with LLM(...) as llm:`` or ``llm.shutdown()`` ends the engine at a known point (its
worker processes, process groups and device memory); dropping the last reference to it,
or the interpreter's exit, does the same.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

from tqdm import tqdm

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.engine.llm_engine import LLMEngine
from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.core.sampling_params import SamplingParams

Prompt = str | list[int]


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

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 params: SamplingParams | Sequence[SamplingParams] | None = None,
                 priority: Sequence[int] | None = None,
                 use_tqdm: bool = False) -> list[RequestOutput]:
        """One RequestOutput per prompt, in order. A prompt is text or a token-id list."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        params = params or SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("give one SamplingParams, or one per prompt")
        ids = []
        for i, (prompt, p) in enumerate(zip(prompts, params)):
            request_id = str(next(self._ids))
            self.engine.add_request(request_id, prompt, p.clone(output_kind="final_only"),
                                    priority[i] if priority else 0)
            ids.append(request_id)
        finished: dict[str, RequestOutput] = {}
        bar = tqdm(total=len(ids), desc="generate", disable=not use_tqdm)
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.finished:
                    finished[out.request_id] = out
                    bar.update(1)
        bar.close()
        return [finished[i] for i in ids]
