"""An engine factory for the engine core process (``engine_factory=
"tests.runtime.server.faulty_engine:build"``): a real LLMEngine whose step raises while a
request with FAIL_STEP_PROMPT is in it, and which refuses to add REFUSE_PROMPT."""
from __future__ import annotations

from kubellm.runtime.engine.llm_engine import LLMEngine

FAIL_STEP_PROMPT = "please fail this step"
REFUSE_PROMPT = "please refuse me"


def build(config) -> LLMEngine:
    engine = LLMEngine.from_config(config)
    fail_ids = engine.tokenizer.encode(FAIL_STEP_PROMPT)
    refuse_ids = engine.tokenizer.encode(REFUSE_PROMPT)
    real_step, real_add = engine.step, engine.add_request

    def step():
        if any(list(g.prompt_token_ids) == fail_ids for g in engine.output.groups.values()):
            raise RuntimeError("injected fault")
        return real_step()

    def add_request(request_id, prompt, params, priority=0):
        if list(prompt) == refuse_ids:
            raise RuntimeError("no thanks")
        return real_add(request_id, prompt, params, priority)

    engine.step, engine.add_request = step, add_request
    return engine
