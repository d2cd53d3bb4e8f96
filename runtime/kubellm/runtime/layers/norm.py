"""RMSNorm, optionally fused with the residual add that precedes it."""
from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """``rmsnorm(x)``; with ``residual``: ``(rmsnorm(x + residual), x + residual)``."""
        # one fused Triton pass instead of five kernels; [T, heads, D] too (q/k norm)
        if x.is_cuda and (x.dim() == 2 or (x.dim() == 3 and residual is None)):
            from kubellm.kernels import rms_norm as k
            if residual is None:
                return k.rms_norm(x, self.weight, self.eps)
            return k.fused_add_rms_norm(x, residual, self.weight, self.eps)
        if residual is not None:
            x = x + residual
            residual = x
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        out = self.weight * h.to(dtype)
        return out if residual is None else (out, residual)
