"""Top-k routers of mixture-of-experts blocks: which experts each token goes to, and
with what weight.

Families differ only in a few choices, so one router covers them (``RouterSpec``):
- Mixtral: softmax over all experts, top-k, renormalized over the k;
- Qwen2-MoE / Qwen3-MoE: the same, renormalized only with ``norm_topk_prob``, weights
  rounded to the model dtype;
- DeepSeek-V3-style (dots.llm1; also GLM-4.5, Kimi K2): sigmoid scores, a learned
  per-expert bias that steers the choice but not the weights, the choice limited to the
  best ``topk_groups`` of ``num_groups`` expert groups, renormalized, then scaled by
  ``routed_scaling_factor``; the router runs in fp32.

The router's weight is whole on every rank (tiny: experts x hidden).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

SCORINGS = ("softmax", "sigmoid")


@dataclass(frozen=True)
class RouterSpec:
    top_k: int
    scoring: str = "softmax"
    renormalize: bool = True
    num_groups: int = 1
    topk_groups: int = 1
    routed_scaling_factor: float = 1.0
    correction_bias: bool = False     # e_score_correction_bias (steers the choice only)
    fp32: bool = False                # router weight and logits in fp32
    round_weights: bool = False       # weights rounded to the model dtype (Qwen)

    def validate(self, num_experts: int) -> None:
        if self.scoring not in SCORINGS:
            raise ValueError(f"scoring_func must be one of {', '.join(SCORINGS)}, "
                             f"got {self.scoring!r}")
        if not 1 <= self.top_k <= num_experts:
            raise ValueError(f"num_experts_per_tok={self.top_k} must be between 1 and "
                             f"the {num_experts} experts")
        if self.num_groups < 1 or num_experts % self.num_groups:
            raise ValueError(f"n_group={self.num_groups} must divide the {num_experts} experts")
        if not 1 <= self.topk_groups <= self.num_groups:
            raise ValueError(f"topk_group={self.topk_groups} must be between 1 and "
                             f"n_group={self.num_groups}")
        per_group = num_experts // self.num_groups
        if self.num_groups > 1 and per_group < 2:
            raise ValueError(f"n_group={self.num_groups} leaves fewer than 2 experts a group")
        if self.num_groups > 1 and self.topk_groups * per_group < self.top_k:
            raise ValueError(f"topk_group={self.topk_groups} groups of {per_group} experts "
                             f"hold fewer than num_experts_per_tok={self.top_k}")


class TopKRouter(nn.Module):
    def __init__(self, hidden: int, num_experts: int, spec: RouterSpec):
        super().__init__()
        spec.validate(num_experts)
        self.spec = spec
        self.num_experts = num_experts
        dtype = torch.float32 if spec.fp32 else None
        self.weight = nn.Parameter(torch.empty(num_experts, hidden, dtype=dtype),
                                   requires_grad=False)
        self.use_triton: bool | None = None   # None: the fused kernel on CUDA tensors
        self.e_score_correction_bias = None
        if spec.correction_bias:
            self.e_score_correction_bias = nn.Parameter(
                torch.empty(num_experts, dtype=torch.float32), requires_grad=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, H] -> (topk_weights [T, k] fp32, topk_ids [T, k] int64, or int32 from
        the fused kernel)."""
        spec = self.spec
        logits = nn.functional.linear(x.float() if spec.fp32 else x, self.weight)
        use_triton = x.is_cuda if self.use_triton is None else self.use_triton
        if use_triton and self._plain_softmax:   # one kernel instead of ~8
            from kubellm.kernels.topk_softmax import topk_softmax
            return topk_softmax(logits, spec.top_k, spec.renormalize,
                                logits.dtype if spec.round_weights else None)
        if spec.scoring == "softmax":
            scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
        else:
            scores = logits.float().sigmoid()
        choice = scores
        if self.e_score_correction_bias is not None:
            choice = scores + self.e_score_correction_bias
        if spec.num_groups > 1:
            choice = self._best_groups_only(choice)
        topk_ids = torch.topk(choice, spec.top_k, dim=-1).indices
        topk_weights = scores.gather(1, topk_ids)
        if spec.renormalize:
            topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)
        if spec.routed_scaling_factor != 1.0:
            topk_weights = topk_weights * spec.routed_scaling_factor
        if spec.round_weights:
            topk_weights = topk_weights.to(logits.dtype).float()
        return topk_weights, topk_ids

    @property
    def _plain_softmax(self) -> bool:
        spec = self.spec
        return (spec.scoring == "softmax" and self.e_score_correction_bias is None
                and spec.num_groups == 1 and spec.routed_scaling_factor == 1.0)

    def _best_groups_only(self, choice: torch.Tensor) -> torch.Tensor:
        """Experts outside the ``topk_groups`` best groups (a group scores the sum of its
        two best experts) cannot be chosen."""
        spec = self.spec
        grouped = choice.view(choice.shape[0], spec.num_groups, -1)
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
        best = torch.topk(group_scores, spec.topk_groups, dim=-1).indices
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
        return grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view_as(choice)
