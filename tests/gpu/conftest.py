"""Engines of the GPU tests are shut down when their test ends, passed or failed.

A failed test's frames stay alive after it (pytest keeps ``sys.last_traceback`` for
post-mortem debugging), and with them its engine's weights and KV cache: the next test's
memory profile then finds the GPU full and refuses to start ("leaves no room for the KV
cache"), which hides the first failure behind others."""
from __future__ import annotations

import gc

import pytest
import torch


@pytest.fixture
def make_llm():
    """``make_llm(*args, **kwargs)`` builds an ``LLM`` that is shut down at teardown."""
    from kubellm.runtime import LLM
    made = []

    def make(*args, **kwargs):
        llm = LLM(*args, **kwargs)
        made.append(llm)
        return llm
    yield make
    for llm in made:
        llm.shutdown()
    made.clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
