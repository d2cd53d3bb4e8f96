"""Kernel tests run on CPU under triton's interpreter, on CUDA compiled (tests marked gpu).

Triton decides interpret-or-compile when it is first imported (its own ``tl.max`` etc.
are decorated then), so TRITON_INTERPRET must be set before the first ``import triton``
of the pytest process. We set it here on machines without CUDA; tests/conftest.py should
set it too, because another test folder may import triton (transformers' models do)
before this file is read. If that happened, the launchers raise a RuntimeError saying so.
"""
import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def cuda():
    if not HAS_CUDA:
        pytest.skip(reason="needs a CUDA GPU")
    from kubellm.kernels._launch import is_interpreted
    from kubellm.kernels.paged_attention import _paged_attention_kernel
    if is_interpreted(_paged_attention_kernel):
        pytest.fail("GPU kernel tests would run in triton's interpreter: TRITON_INTERPRET is "
                    "set (tests/conftest.py must set it only on machines without CUDA)")
    return torch.device("cuda")
