"""The MoE block in one process playing every rank in turn: under tensor parallelism
(each expert's intermediate dimension split) and expert parallelism (experts split
whole), each rank loads only its part of the checkpoint tensors, and the ranks' partial
sums add up to the single-process block. The Triton kernel (interpreted on CPU) and the
CPU loop give the same block output."""
from __future__ import annotations


import pytest
import torch

from kubellm.runtime.layers.moe import SparseMoeBlock
from kubellm.runtime.layers.moe_router import RouterSpec

HIDDEN, EXPERTS, INTER, SHARED, TOP_K = 32, 8, 24, 16, 3


def checkpoint(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=gen) * 0.3  # noqa: E731
    tensors = {"gate.weight": rand(EXPERTS, HIDDEN), "shared_expert_gate.weight": rand(1, HIDDEN),
               "shared_expert.gate_proj.weight": rand(SHARED, HIDDEN),
               "shared_expert.up_proj.weight": rand(SHARED, HIDDEN),
               "shared_expert.down_proj.weight": rand(HIDDEN, SHARED)}
    for e in range(EXPERTS):
        tensors[f"experts.{e}.gate"] = rand(INTER, HIDDEN)
        tensors[f"experts.{e}.up"] = rand(INTER, HIDDEN)
        tensors[f"experts.{e}.down"] = rand(HIDDEN, INTER)
    return tensors


def build(tensors: dict, stacked: bool = False, skip_expert: int | None = None):
    block = SparseMoeBlock(HIDDEN, EXPERTS, INTER, RouterSpec(top_k=TOP_K), SHARED,
                           shared_gate=True)
    with torch.no_grad():
        block.gate.weight.copy_(tensors["gate.weight"])
        block.shared_expert_gate.weight.copy_(tensors["shared_expert_gate.weight"])
    mlp = block.shared_expert
    mlp.gate_up_proj.load_weight(mlp.gate_up_proj.weight, tensors["shared_expert.gate_proj.weight"], 0)
    mlp.gate_up_proj.load_weight(mlp.gate_up_proj.weight, tensors["shared_expert.up_proj.weight"], 1)
    mlp.down_proj.load_weight(mlp.down_proj.weight, tensors["shared_expert.down_proj.weight"])
    experts = block.experts
    if stacked:   # transformers' in-memory layout: [E, 2I, H] and [E, H, I]
        gate_up = torch.stack([torch.cat([tensors[f"experts.{e}.gate"], tensors[f"experts.{e}.up"]])
                               for e in range(EXPERTS)])
        down = torch.stack([tensors[f"experts.{e}.down"] for e in range(EXPERTS)])
        experts.load_weight(experts.w13_weight, gate_up, ("all", "gate_up"))
        experts.load_weight(experts.w2_weight, down, ("all", "down"))
    else:         # the hub's: one tensor per expert and projection
        for e in range(EXPERTS):
            for part in ("gate", "up", "down"):
                if (e, part) == (skip_expert, "up"):
                    continue
                param = experts.w2_weight if part == "down" else experts.w13_weight
                experts.load_weight(param, tensors[f"experts.{e}.{part}"], (e, part))
    experts.check_loaded("test checkpoint")
    return block


@pytest.mark.parametrize("tp, expert_parallel", [(2, False), (4, False), (2, True), (4, True)])
def test_ranks_partial_sums_add_up_to_one_process(as_rank, tp, expert_parallel):
    tensors = checkpoint()
    x = torch.randn(13, HIDDEN)
    whole = build(tensors)(x)
    total = torch.zeros_like(whole)
    for rank in range(tp):
        as_rank(tp, rank, expert_parallel)
        block = build(tensors, stacked=rank % 2 == 1)   # both checkpoint layouts
        w13, w2 = block.experts.w13_weight, block.experts.w2_weight
        if expert_parallel:   # whole experts, a 1/tp share of them
            per = EXPERTS // tp
            assert w13.shape == (per, 2 * INTER, HIDDEN) and w2.shape == (per, HIDDEN, INTER)
            first = rank * per
            assert torch.equal(w13[0, :INTER], tensors[f"experts.{first}.gate"])
            assert torch.equal(w2[-1], tensors[f"experts.{first + per - 1}.down"])
        else:                 # every expert, a 1/tp slice of its intermediate dimension
            part = INTER // tp
            assert w13.shape == (EXPERTS, 2 * part, HIDDEN) and w2.shape == (EXPERTS, HIDDEN, part)
            rows = slice(rank * part, (rank + 1) * part)
            assert torch.equal(w13[5, part:], tensors["experts.5.up"][rows])
            assert torch.equal(w2[5], tensors["experts.5.down"][:, rows])
        total += block(x)
    torch.testing.assert_close(total, whole, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("expert_parallel", [False, True])
def test_triton_kernel_and_cpu_loop_agree_in_the_block(as_rank, expert_parallel):
    tensors = checkpoint(seed=1)
    x = torch.randn(9, HIDDEN)
    as_rank(2, 1, expert_parallel)
    block = build(tensors)
    loop = block(x)
    block.experts.use_triton = True
    torch.testing.assert_close(block(x), loop, atol=1e-4, rtol=1e-4)


def test_a_missing_expert_tensor_is_named(as_rank):
    with pytest.raises(ValueError, match=r"lacks expert weights: \[\(5, 'up'\)\]"):
        build(checkpoint(), skip_expert=5)


def test_experts_must_split_over_the_ranks(as_rank):
    as_rank(3, 0, expert_parallel=True)
    with pytest.raises(ValueError, match="num_experts=8 is not divisible by tensor_parallel_size=3"):
        build(checkpoint())
    as_rank(5, 0)
    with pytest.raises(ValueError, match="moe_intermediate_size=24 is not divisible"):
        build(checkpoint())
