"""A Triton compile after startup is logged with its kernel and counted. On CPU the hooks
are called as Triton's JIT calls them (keyword arguments, a None return lets the compile
go on); tests/gpu/test_compile_watch_cuda.py compiles a real kernel."""
from __future__ import annotations

import logging
import types

import pytest

from kubellm.runtime.worker import compile_watch


@pytest.fixture
def watched():
    from triton import knobs
    before = knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook
    assert compile_watch.watch_compiles_after_startup()
    yield knobs.runtime
    knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = before


def test_a_late_compile_is_logged_with_its_kernel_and_counted(watched, caplog):
    fn = types.SimpleNamespace(module="kubellm.kernels.paged_attention",
                               name="_paged_attention_kernel")
    call = dict(key=("sig", 7), repr="_paged_attention_kernel[num_warps=4](num_tokens: i32)",
                fn=fn, compile={}, is_manual_warmup=False, already_compiled=False)
    count = compile_watch.compiles_after_startup
    with caplog.at_level(logging.WARNING, logger=compile_watch.__name__):
        assert watched.jit_cache_hook(**call) is None      # the compile is not skipped
        assert watched.jit_post_compile_hook(**call) is None
    assert compile_watch.compiles_after_startup == count + 1
    [record] = caplog.records
    assert "kubellm.kernels.paged_attention._paged_attention_kernel" in record.message
    assert "num_tokens: i32" in record.message and " ms" in record.message


def test_nothing_is_installed_for_a_cpu_engine():
    import torch
    from triton import knobs
    before = knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook
    assert compile_watch.watch_compiles_after_startup(torch.device("cpu")) is False
    assert (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook) == before
