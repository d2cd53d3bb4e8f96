"""Mixture-of-experts block: a router, the experts stacked in two tensors, and optionally
a shared expert (always on) with its own sigmoid gate.

Experts under tensor parallelism are split like a dense MLP: every rank holds every
expert's slice of the intermediate dimension (gate/up rows, down columns) and the block's
partial sums are all-reduced. With expert parallelism (``ParallelState.expert_parallel``)
rank r holds experts [r*E/tp, (r+1)*E/tp) whole instead; tokens are already on every
rank (the attention's all-reduce leaves them there, an all-gather dispatch for free),
each rank runs the pairs routed to its own experts, and the same all-reduce combines
them. One all-reduce per block either way, the shared expert's partial sums included.

Weights load from per-expert checkpoint tensors (Hugging Face hub format: one tensor per
expert and projection) or from transformers' stacked tensors; see ``load_weight``.
"""
from __future__ import annotations

import torch
from torch import nn

from kubellm.runtime.layers.activation import SiluAndMul
from kubellm.runtime.layers.linear import MergedColumnParallelLinear, RowParallelLinear
from kubellm.runtime.layers.moe_router import RouterSpec, TopKRouter
from kubellm.runtime.parallel import state as ps

PARTS = ("gate", "up", "down")


def _divide(n: int, d: int, what: str) -> int:
    if n % d:
        raise ValueError(f"{what}={n} is not divisible by tensor_parallel_size={d}")
    return n // d


class FusedExperts(nn.Module):
    """``w13_weight`` [E_local, 2*I_local, H] (each expert's gate rows, then its up rows)
    and ``w2_weight`` [E_local, H, I_local]. ``forward`` returns this rank's partial sums."""

    def __init__(self, num_experts: int, hidden: int, intermediate: int):
        super().__init__()
        st = ps.state()
        self.num_experts = num_experts
        self.expert_parallel = st.expert_parallel and st.tp_size > 1
        if self.expert_parallel:
            self.num_local = _divide(num_experts, st.tp_size, "num_experts")
            self.expert_start = st.tp_rank * self.num_local
            self.inter_local, self.inter_start = intermediate, 0
        else:
            self.num_local, self.expert_start = num_experts, 0
            self.inter_local = _divide(intermediate, st.tp_size, "moe_intermediate_size")
            self.inter_start = st.tp_rank * self.inter_local
        self.w13_weight = nn.Parameter(torch.empty(self.num_local, 2 * self.inter_local, hidden),
                                       requires_grad=False)
        self.w2_weight = nn.Parameter(torch.empty(self.num_local, hidden, self.inter_local),
                                      requires_grad=False)
        self.use_triton: bool | None = None   # None: the Triton kernel on CUDA tensors
        self._loaded: set[tuple[int, str]] = set()

    def load_weight(self, param, loaded, shard_id) -> None:
        """``shard_id`` = (expert, "gate" | "up" | "down") for one expert's [I, H] or
        [H, I] tensor, or ("all", "gate_up" | "down") for a stack of every expert's
        ([E, 2I, H] gate rows then up rows, [E, H, I]). Other ranks' experts are skipped;
        only this rank's slice of the intermediate dimension is read."""
        expert, part = shard_id
        if expert == "all":
            for e in range(self.expert_start, self.expert_start + self.num_local):
                one = loaded[e:e + 1][0]
                if part == "down":
                    self.load_weight(param, one, (e, "down"))
                else:
                    inter = one.shape[0] // 2
                    self.load_weight(param, one[:inter], (e, "gate"))
                    self.load_weight(param, one[inter:], (e, "up"))
            return
        local = expert - self.expert_start
        if not 0 <= local < self.num_local:
            return  # another rank's expert
        size, start = self.inter_local, self.inter_start
        if part == "gate":
            param.data[local, :size].copy_(loaded[start:start + size])
        elif part == "up":
            param.data[local, size:].copy_(loaded[start:start + size])
        else:
            param.data[local].copy_(loaded[:, start:start + size])
        self._loaded.add((local, part))

    def check_loaded(self, source: str) -> None:
        """Every expert of this rank got its three projections."""
        missing = [(self.expert_start + e, p) for e in range(self.num_local) for p in PARTS
                   if (e, p) not in self._loaded]
        if missing:
            raise ValueError(f"{source} lacks expert weights: {missing[:6]} (expert, part)")

    def forward(self, x: torch.Tensor, topk_weights: torch.Tensor,
                topk_ids: torch.Tensor) -> torch.Tensor:
        use_triton = x.is_cuda if self.use_triton is None else self.use_triton
        if use_triton:
            from kubellm.kernels.fused_moe import fused_moe
            return fused_moe(x, self.w13_weight, self.w2_weight, topk_weights, topk_ids,
                             self.expert_start, self.num_experts)
        return self._per_expert_loop(x, topk_weights, topk_ids)

    def _per_expert_loop(self, x, topk_weights, topk_ids) -> torch.Tensor:
        return per_expert_loop(x, self.w13_weight, self.w2_weight, topk_weights, topk_ids,
                               self.expert_start)


def per_expert_loop(x, w13, w2, topk_weights, topk_ids, expert_start: int = 0):
    """The CPU path (and the GPU benchmark's peer): one gathered matmul pair per expert
    that has tokens, as transformers does. Returns partial sums over this rank's experts."""
    out = torch.zeros_like(x)
    size = w2.shape[2]
    for local in range(w13.shape[0]):
        token, slot = torch.where(topk_ids == local + expert_start)
        if token.numel() == 0:
            continue
        gate_up = nn.functional.linear(x[token], w13[local])
        act = nn.functional.silu(gate_up[:, :size]) * gate_up[:, size:]
        down = nn.functional.linear(act, w2[local])
        out.index_add_(0, token, (down * topk_weights[token, slot, None]).to(x.dtype))
    return out


class GatedMLP(nn.Module):
    """A dense SiLU-gated MLP whose partial sums the caller reduces (shared experts)."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden, [intermediate] * 2)
        self.down_proj = RowParallelLinear(intermediate, hidden, reduce_results=False)
        self.act = SiluAndMul()

    def forward(self, x):
        return self.down_proj(self.act(self.gate_up_proj(x)))


class SparseMoeBlock(nn.Module):
    """Parameter names follow the checkpoints: ``gate`` (router), ``experts``,
    ``shared_expert``, ``shared_expert_gate``."""

    def __init__(self, hidden: int, num_experts: int, intermediate: int, router: RouterSpec,
                 shared_intermediate: int = 0, shared_gate: bool = False):
        super().__init__()
        self.gate = TopKRouter(hidden, num_experts, router)
        self.experts = FusedExperts(num_experts, hidden, intermediate)
        self.tp_group = ps.state().tp_group  # kept: the reduction runs in this layout's group
        self.shared_expert = GatedMLP(hidden, shared_intermediate) if shared_intermediate \
            else None
        self.shared_expert_gate = None
        if shared_gate:
            self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)
            self.shared_expert_gate.weight.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = self.gate(x)
        out = self.experts(x, topk_weights, topk_ids)
        if self.shared_expert is not None:
            shared = self.shared_expert(x)
            if self.shared_expert_gate is not None:
                shared = torch.sigmoid(self.shared_expert_gate(x)) * shared
            out = out + shared
        return ps.all_reduce(out, self.tp_group)
