"""Linear layers split across tensor-parallel ranks.

Column-parallel layers split the output features (no communication); row-parallel
layers split the input features and all-reduce the partial sums. Each layer has a
``load_weight(param, loaded, shard_id=None)`` that copies this rank's slice out of the
checkpoint tensor (a safetensors slice, so other ranks' parts are never read). It lives
on the module, not the parameter, because materializing from ``meta`` replaces the
parameter objects.
"""
from __future__ import annotations

import torch
from torch import nn

from kubellm.runtime.parallel import state as ps


def _divide(n: int, d: int, what: str) -> int:
    if n % d:
        raise ValueError(f"{what}={n} is not divisible by tensor_parallel_size={d}")
    return n // d


class ColumnParallelLinear(nn.Module):
    """y = x W^T with W's rows (output features) split across ranks."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        self.tp_size, self.tp_rank = ps.tp_size(), ps.tp_rank()
        self.out_per_rank = _divide(out_features, self.tp_size, "out_features")
        self.weight = nn.Parameter(torch.empty(self.out_per_rank, in_features),
                                   requires_grad=False)
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(self.out_per_rank), requires_grad=False)

    def load_weight(self, param, loaded, shard_id=None):
        start = self.tp_rank * param.shape[0]
        param.data.copy_(loaded[start:start + param.shape[0]])

    def forward(self, x):
        return nn.functional.linear(x, self.weight, self.bias)


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel projections of one input in one matmul (gate + up)."""

    def __init__(self, in_features: int, out_sizes: list[int], bias: bool = False):
        self.out_sizes = out_sizes
        super().__init__(in_features, sum(out_sizes), bias)

    def load_weight(self, param, loaded, shard_id=None):
        per_rank = [s // self.tp_size for s in self.out_sizes]
        offset = sum(per_rank[:shard_id])
        size = per_rank[shard_id]
        start = self.tp_rank * size
        param.data[offset:offset + size].copy_(loaded[start:start + size])


class QKVParallelLinear(ColumnParallelLinear):
    """Fused q, k, v projections. Query heads are split across ranks; KV heads too, or
    replicated when there are fewer KV heads than ranks."""

    def __init__(self, hidden: int, head_dim: int, num_heads: int, num_kv_heads: int,
                 bias: bool = False):
        tp = ps.tp_size()
        self.head_dim = head_dim
        self.num_heads = _divide(num_heads, tp, "num_attention_heads")
        if num_kv_heads >= tp:
            self.num_kv_heads = _divide(num_kv_heads, tp, "num_key_value_heads")
            self.kv_replicas = 1
        else:
            self.num_kv_heads = 1
            self.kv_replicas = _divide(tp, num_kv_heads, "tensor_parallel_size over KV heads")
        out = (self.num_heads + 2 * self.num_kv_heads) * head_dim * tp
        super().__init__(hidden, out, bias)

    def load_weight(self, param, loaded, shard_id=None):
        q_size = self.num_heads * self.head_dim
        kv_size = self.num_kv_heads * self.head_dim
        if shard_id == "q":
            offset, size, start = 0, q_size, self.tp_rank * q_size
        else:
            offset = q_size if shard_id == "k" else q_size + kv_size
            size = kv_size
            start = (self.tp_rank // self.kv_replicas) * kv_size
        param.data[offset:offset + size].copy_(loaded[start:start + size])


class RowParallelLinear(nn.Module):
    """y = x W^T with W's columns (input features) split; partial sums all-reduced."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        parallel = ps.state()  # kept: the reduction runs in this layout's group
        self.tp_size, self.tp_rank, self.tp_group = \
            parallel.tp_size, parallel.tp_rank, parallel.tp_group
        self.in_per_rank = _divide(in_features, self.tp_size, "in_features")
        self.weight = nn.Parameter(torch.empty(out_features, self.in_per_rank),
                                   requires_grad=False)
        self.bias = None
        if bias:  # added once, after the reduction
            self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False)

    def load_weight(self, param, loaded, shard_id=None):
        if param.dim() == 1:  # the bias is whole on every rank
            param.data.copy_(loaded[:])
            return
        start = self.tp_rank * self.in_per_rank
        param.data.copy_(loaded[:, start:start + self.in_per_rank])

    def forward(self, x):
        y = ps.all_reduce(nn.functional.linear(x, self.weight), self.tp_group)
        return y if self.bias is None else y + self.bias
