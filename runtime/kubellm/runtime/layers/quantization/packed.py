"""One weight in the common quantized layout, whole (as the checkpoint holds it), before a
tensor-parallel rank takes its slice: ``W[k, n] = codes[k, n] * scales[g, n] + biases[g, n]``
with g = k // group_size, or ``g_idx[k]``. Codes are unpacked here (uint8 [K, N]): the
layer packs its slice once it is cut."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class QuantizedWeight:
    codes: torch.Tensor        # uint8 [K, N], values in [0, 2**bits)
    scales: torch.Tensor       # float32 [num_groups, N]
    biases: torch.Tensor       # float32 [num_groups, N]
    bits: int
    group_size: int
    g_idx: torch.Tensor | None = None   # int32 [K] (GPTQ act order)

    @property
    def shape(self) -> tuple[int, int]:
        """(out_features, in_features), as the float weight it stands for."""
        return self.codes.shape[1], self.codes.shape[0]

    def columns(self, start: int, size: int) -> "QuantizedWeight":
        """Output features [start, start + size) (a column-parallel slice)."""
        cut = slice(start, start + size)
        return QuantizedWeight(self.codes[:, cut], self.scales[:, cut], self.biases[:, cut],
                               self.bits, self.group_size, self.g_idx)

    def permute_columns(self, order: torch.Tensor) -> "QuantizedWeight":
        return QuantizedWeight(self.codes[:, order], self.scales[:, order],
                               self.biases[:, order], self.bits, self.group_size, self.g_idx)

    def rows(self, start: int, size: int) -> "QuantizedWeight":
        """Input features [start, start + size) (a row-parallel slice). Without g_idx the
        slice must hold whole groups; with it every group's scales stay (any may occur)."""
        if self.g_idx is not None:
            return QuantizedWeight(self.codes[start:start + size], self.scales, self.biases,
                                   self.bits, self.group_size, self.g_idx[start:start + size])
        g = self.group_size
        if start % g or size % g:
            raise ValueError(f"rows [{start}, {start + size}) split a group of {g}")
        return QuantizedWeight(self.codes[start:start + size],
                               self.scales[start // g:(start + size) // g],
                               self.biases[start // g:(start + size) // g], self.bits, g)

    def regrouped(self, group_size: int) -> "QuantizedWeight":
        """The same weight with smaller groups (each group's scale repeated): fused layers
        whose parts come in different group sizes (GGUF Q4_K next to Q6_K) share one."""
        if group_size == self.group_size:
            return self
        if self.group_size % group_size or self.g_idx is not None:
            raise ValueError(f"cannot regroup groups of {self.group_size} into {group_size}")
        ratio = self.group_size // group_size
        return QuantizedWeight(self.codes, self.scales.repeat_interleave(ratio, 0),
                               self.biases.repeat_interleave(ratio, 0), self.bits, group_size)

    def dequantize(self) -> torch.Tensor:
        """float32 [out, in], the nn.Linear layout (for references and checks)."""
        k = self.codes.shape[0]
        g = self.g_idx.long() if self.g_idx is not None else \
            torch.arange(k, device=self.codes.device) // self.group_size
        return torch.addcmul(self.biases[g], self.codes.float(), self.scales[g]).t()
