"""Prefetch each linear layer's weights into L2 while the small kernels before it run
(the ``l2_prefetch`` kernel switch).

At a few rows a decode step is a chain of weight reads: QKV, rotary and attention, O,
norm, gate/up, activation, down, norm, the next QKV. The GEMMs stream their weights at
near the copy bandwidth, but in between device memory idles: the norms, rotary and
attention read little, and each GEMM starts with an empty pipeline. Here every linear
layer, once launched, hands a side stream a prefetch of the next linear layer's first
``max_bytes`` (kernels/l2_prefetch.py); the side stream waits only for that layer, so the
prefetch runs beside the small kernels that follow, and the next GEMM finds its first
bytes in L2. The main stream never waits for a prefetch until the model's forward ends
(a CUDA graph's capture needs every branch joined), where the last one has long finished.

Steps of more than ``max_rows`` tokens are left alone: their GEMMs are bound by the
tensor cores, not by the weight read. "Next" is module order, which is call order in the
dense decoder models (attention's projections, then the MLP's, layer by layer); where it
is not (a mixture-of-experts block's fused experts are not linear modules), a prefetch
reads weights that are used a little later, which costs bandwidth and changes no result.
"""
from __future__ import annotations

import logging

import torch
from torch import nn

log = logging.getLogger(__name__)

MAX_BYTES = 32 * 2**20   # per linear layer: about what the L2 holds beside a GEMM's reads
MAX_ROWS = 16
WHEN = ("after", "before")   # launched after the previous linear's GEMM, or beside it


def linear_layers(model: nn.Module) -> list[nn.Module]:
    """The model's linear layers (every format's: bf16, 4-bit, FP8) in module order."""
    from kubellm.runtime.layers.linear import ColumnParallelLinear, RowParallelLinear
    return [m for m in model.modules()
            if isinstance(m, (ColumnParallelLinear, RowParallelLinear))]


def weight_tensors(layer: nn.Module) -> list[torch.Tensor]:
    """The tensors a linear layer's forward reads, largest first (a 4-bit layer's codes
    before its scales and biases)."""
    tensors = [p for p in layer.parameters(recurse=False) if p is not None and p.numel()]
    tensors += [b for b in layer.buffers(recurse=False) if b is not None and b.numel()]
    return sorted(tensors, key=lambda t: -t.numel() * t.element_size())


def on_gpu(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_cuda


class WeightPrefetcher:
    """Forward hooks on ``model``'s linear layers; ``remove()`` takes them off. They act
    while ``enabled()`` says so (the model runner's switch, which a benchmark flips
    between steps); a CUDA graph keeps the prefetches captured in it."""

    def __init__(self, model: nn.Module, max_bytes: int = MAX_BYTES,
                 max_rows: int = MAX_ROWS, mode: str = "line", when: str = "after",
                 enabled=lambda: True):
        from kubellm.kernels.l2_prefetch import MODES
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if when not in WHEN:
            raise ValueError(f"when must be one of {', '.join(WHEN)}, got {when!r}")
        self.max_bytes, self.max_rows, self.mode, self.when = max_bytes, max_rows, mode, when
        self.enabled = enabled
        self.layers = linear_layers(model)
        self.tensors = [weight_tensors(layer) for layer in self.layers]
        self.side: torch.cuda.Stream | None = None
        self.pending = False
        self.launched = 0     # prefetches launched, counted on the host
        self.step_order: list[int] = []   # the last forward's prefetched layers, in order
        self.handles = []
        for i, layer in enumerate(self.layers[:-1]):
            if when == "after":
                hook = lambda _m, args, _out, i=i: self._prefetch(i + 1, args[0])  # noqa: E731
                self.handles.append(layer.register_forward_hook(hook))
            else:
                hook = lambda _m, args, i=i: self._prefetch(i + 1, args[0])  # noqa: E731
                self.handles.append(layer.register_forward_pre_hook(hook))
        if self.layers:   # the first layer's weights while the embedding runs
            self.handles.append(model.register_forward_pre_hook(
                lambda _m, args: self._prefetch(0, args[0])))
        self.handles.append(model.register_forward_hook(lambda *_: self.join()))

    def _prefetch(self, index: int, x: torch.Tensor | None) -> None:
        if index == 0:
            self.step_order = []
        if not self.enabled() or not on_gpu(x):   # (x None: a later stage's token ids)
            return
        rows = x.numel() // x.shape[-1] if x.dim() > 1 else x.numel()   # token ids: 1-D
        if rows > self.max_rows:
            return
        self._launch(index, x.device)
        self.pending = True
        self.launched += 1
        self.step_order.append(index)

    def _launch(self, index: int, device: torch.device) -> None:
        """On the side stream, once the main stream's work so far is done, prefetch the
        first ``max_bytes`` of layer ``index``'s tensors."""
        from kubellm.kernels.l2_prefetch import l2_prefetch
        if self.side is None:
            self.side = torch.cuda.Stream(device)
        self.side.wait_stream(torch.cuda.current_stream(device))
        left = self.max_bytes
        with torch.cuda.stream(self.side):
            for t in self.tensors[index]:
                if left <= 0:
                    break
                left -= l2_prefetch(t, left, self.mode)

    def join(self) -> None:
        """The main stream waits for the side stream's prefetches (all long done)."""
        if self.pending and self.side is not None:
            torch.cuda.current_stream(self.side.device).wait_stream(self.side)
        self.pending = False

    def remove(self) -> None:
        self.join()
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def describe(self) -> str:
        return (f"L2 prefetch of each linear layer's first {self.max_bytes >> 20} MiB "
                f"({self.mode}, {self.when} the previous one) at <= {self.max_rows} rows, "
                f"{len(self.layers)} layers")
