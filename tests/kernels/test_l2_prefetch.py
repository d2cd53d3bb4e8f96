"""The L2 prefetch kernel (kernels/l2_prefetch.py): what span it covers, that it does
nothing on CPU tensors, that its inline PTX builds for Hopper (sm_90) to the prefetch
instructions each mode names, and on a CUDA GPU that it runs and changes no data."""
from __future__ import annotations

import pytest
import torch

from kubellm.kernels.l2_prefetch import (BULK_BYTES, LINE, LINES_PER_PROGRAM, MODES,
                                         l2_prefetch, l2_prefetch_reference, prefetch_plan)


@pytest.mark.parametrize("mode", list(MODES))
def test_plan_covers_whole_units_of_the_span_asked_for(mode):
    unit = BULK_BYTES if mode == "bulk" else LINE
    per_program = LINES_PER_PROGRAM * LINE // unit
    assert prefetch_plan(0, mode) == (unit, 0, 0)
    assert prefetch_plan(unit - 1, mode) == (unit, 0, 0)      # a partial unit is left out
    assert prefetch_plan(3 * unit + 5, mode) == (unit, 3, 1)
    assert prefetch_plan(per_program * unit, mode) == (unit, per_program, 1)
    assert prefetch_plan(per_program * unit + unit, mode) == (unit, per_program + 1, 2)


def test_reference_caps_the_span_at_max_bytes():
    t = torch.zeros(1000, 64, dtype=torch.bfloat16)          # 128,000 bytes
    assert l2_prefetch_reference(t) == (128_000 // LINE * LINE, 128_000 // LINE)
    assert l2_prefetch_reference(t, max_bytes=1000) == (896, 7)
    assert l2_prefetch_reference(t, max_bytes=10**9, mode="bulk") == (
        128_000 // BULK_BYTES * BULK_BYTES, 128_000 // BULK_BYTES)


def test_unknown_mode_and_strided_tensor_are_refused():
    with pytest.raises(ValueError, match="mode must be one of line, line_last, bulk"):
        prefetch_plan(4096, "lines")
    with pytest.raises(ValueError, match="contiguous"):
        l2_prefetch(torch.zeros(8, 8).t())


def test_cpu_tensor_is_left_alone():
    t = torch.arange(4096, dtype=torch.float32)
    before = t.clone()
    assert l2_prefetch(t) == 0
    assert torch.equal(t, before)


@pytest.mark.parametrize("mode,instruction", [("line", "CCTL"), ("line_last", "CCTL"),
                                              ("bulk", "UBLKPF")])
def test_builds_for_hopper_to_its_prefetch_instructions(mode, instruction):
    """ptxas accepts each mode's PTX for sm_90 and emits one prefetch per unit of a
    program's span (CCTL: a line prefetch; UBLKPF: a bulk prefetch through the TMA unit)
    and no loads or stores (the kernel reads nothing back, writes nothing)."""
    from tests.kernels.gemv_sass import opcodes
    unit = BULK_BYTES if mode == "bulk" else LINE
    per_program = LINES_PER_PROGRAM * LINE // unit
    block = min(per_program, 128)
    ops = opcodes({"module": "kubellm.kernels.l2_prefetch", "kernel": "_l2_prefetch_kernel",
                   "signature": {"base": "*u8", "n_units": "i64", "UNIT": "constexpr",
                                 "UNITS_PER_PROGRAM": "constexpr", "BLOCK": "constexpr",
                                 "MODE": "constexpr"},
                   "constexprs": {"UNIT": unit, "UNITS_PER_PROGRAM": per_program,
                                  "BLOCK": block, "MODE": MODES[mode]},
                   "num_warps": 4, "divisible_by_16": [0]})
    assert ops.get(instruction, 0) >= 1, ops
    if mode != "bulk":   # 128 threads, one line each per pass over the program's span
        assert ops[instruction] == per_program // block, ops
    assert not any(op.startswith(("LDG", "STG", "ST.", "LD.")) for op in ops), ops


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", list(MODES))
def test_runs_on_cuda_and_changes_nothing(mode):
    t = torch.randn(3_000_000, device="cuda")                 # 12 MB: several programs
    before = t.clone()
    asked = l2_prefetch(t, mode=mode)
    torch.cuda.synchronize()
    assert asked == l2_prefetch_reference(t, mode=mode)[0] > 0
    assert torch.equal(t, before)
    graph = torch.cuda.CUDAGraph()                            # and inside a graph
    with torch.cuda.graph(graph):
        l2_prefetch(t, max_bytes=1 << 20, mode=mode)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(t, before)
