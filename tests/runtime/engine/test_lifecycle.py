"""A single-process engine's lifecycle: ``shutdown()``, ``with LLM(...)`` and garbage
collection free its weights, KV cache and graphs at once, and a shut-down engine refuses
work with a clear error. (Multi-process engines: tests/runtime/distributed.)"""
from __future__ import annotations

import gc
import weakref

import pytest

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.core.errors import EngineDeadError

ENGINE = dict(max_model_len=64, num_kv_blocks=16, block_size=8, device="cpu",
              dtype="float32")
PARAMS = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def test_shutdown_frees_the_tensors_and_refuses_work(tiny_model_dir):
    llm = LLM(tiny_model_dir, **ENGINE)
    runner = llm.engine.executor
    cache = weakref.ref(runner.attn_layers[0].k_cache)
    model = weakref.ref(runner.model)
    first = llm.generate("Hello", PARAMS)[0].outputs[0].token_ids
    llm.engine.add_request("left", "unfinished", PARAMS)
    llm.shutdown()
    assert cache() is None and model() is None   # freed now, though llm is still held
    assert not llm.engine.has_unfinished_requests()
    assert llm.engine.errored and "shut down" in str(llm.engine.dead_error)
    with pytest.raises(EngineDeadError, match="shut down"):
        llm.generate("Hello", PARAMS)
    with pytest.raises(EngineDeadError, match="shut down"):
        llm.engine.step()
    llm.shutdown()  # idempotent
    with LLM(tiny_model_dir, **ENGINE) as again:
        assert again.generate("Hello", PARAMS)[0].outputs[0].token_ids == first
    assert again.engine.errored


def test_a_dropped_engine_is_released_without_shutdown(tiny_model_dir):
    # the first engine of a process imports modules, and an import can pin its caller's
    # frames for good (a library's doing, not the engine's): build one before measuring
    LLM(tiny_model_dir, **ENGINE).shutdown()
    llm = LLM(tiny_model_dir, **ENGINE)
    llm.generate("Hello", PARAMS)
    hooks = []
    llm.engine.add_shutdown_hook(lambda: hooks.append("ran"))
    engine, cache = weakref.ref(llm.engine), weakref.ref(
        llm.engine.executor.attn_layers[0].k_cache)
    gc.disable()  # released by reference counting alone, at once: no cycle holds it
    try:
        del llm
        assert engine() is None and cache() is None
        assert hooks == ["ran"]
    finally:
        gc.enable()
