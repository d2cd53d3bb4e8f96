"""Fixtures shared by the runtime's tests."""
from __future__ import annotations

import contextlib

import pytest

from kubellm.runtime.parallel import state as ps


@pytest.fixture
def as_rank():
    """``as_rank(tp_size, tp_rank, expert_parallel=False)``: layers built from then on are
    that rank's (ps.building), with no TP group, so a row-parallel layer returns its
    partial sums unreduced and a test adds them up itself. Back to one process after."""
    with contextlib.ExitStack() as stack:
        def enter(tp_size: int, tp_rank: int, expert_parallel: bool = False) -> None:
            stack.close()
            stack.enter_context(ps.building(ps.ParallelState(
                tp_size=tp_size, tp_rank=tp_rank, expert_parallel=expert_parallel)))
        yield enter
    assert ps.state() is ps.SINGLE_PROCESS
