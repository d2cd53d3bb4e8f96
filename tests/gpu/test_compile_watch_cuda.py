"""On CUDA, a kernel specialization first reached after startup is compiled, logged and
counted by compile_watch."""
from __future__ import annotations

import logging

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip(reason="needs a CUDA GPU", allow_module_level=True)


def test_a_new_specialization_after_startup_is_logged(caplog):
    import triton
    import triton.language as tl
    from triton import knobs

    from kubellm.runtime.worker import compile_watch

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)

    before = knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook
    try:
        assert compile_watch.watch_compiles_after_startup()
        x = torch.zeros(64, device="cuda")
        count = compile_watch.compiles_after_startup
        with caplog.at_level(logging.WARNING, logger=compile_watch.__name__):
            add_one[(1,)](x, 64, BLOCK=64)
            add_one[(1,)](x, 64, BLOCK=64)     # cached: no second compile
            add_one[(1,)](x, 63, BLOCK=64)     # n % 16 != 0: a new specialization
        torch.cuda.synchronize()
        assert compile_watch.compiles_after_startup == count + 2
        assert sum("add_one" in r.message for r in caplog.records) == 2
    finally:
        knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = before
