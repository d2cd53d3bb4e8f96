"""Host-to-device uploads of a step's small input arrays through reused pinned buffers.

Every step ships a handful of numpy arrays (token ids, positions, slots, block tables...).
Pinning fresh host memory per step costs host time, and with async scheduling the
previous step's buffer is still waiting for its copy (queued behind the running step),
so a caching allocator keeps having to find or make another one. Here a few pinned
buffers are used in turn; a buffer is written again only after the copy that last read
it has run (a CUDA event per buffer, long done by then). All arrays of a step go in one
buffer and one copy, each at a 16-byte aligned offset, and come out as typed views.
"""
from __future__ import annotations

import numpy as np
import torch

# Every array starts 16-byte aligned. Triton specialises a kernel on whether each pointer
# argument is 16-byte aligned: offsets that moved with the other arrays' sizes gave each
# step's mix its own compiled variant (seconds of JIT in the middle of a run).
_ALIGN = 16

_TORCH_DTYPES = {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32,
                 np.dtype(np.float32): torch.float32}


class PinnedStaging:
    def __init__(self, device: torch.device, num_buffers: int = 3,
                 initial_bytes: int = 1 << 20):
        self.device = device
        on_cuda = torch.device(device).type == "cuda"
        self._buffers = [_Buffer(initial_bytes, on_cuda) for _ in range(num_buffers)]
        self._next = 0

    def upload(self, arrays: list[np.ndarray]) -> list[torch.Tensor]:
        """Device tensors with the arrays' dtypes and shapes (int64, int32 or float32)."""
        offsets, total = [], 0
        for a in arrays:
            offsets.append(total)
            total += -(-a.nbytes // _ALIGN) * _ALIGN
        buffer = self._buffers[self._next]
        self._next = (self._next + 1) % len(self._buffers)
        buffer.wait_and_reserve(total)
        for a, offset in zip(arrays, offsets):
            if a.size:
                view = buffer.array[offset:offset + a.nbytes].view(a.dtype)
                np.copyto(view, a.ravel(), casting="no")
        device_bytes = torch.empty(max(total, 8), dtype=torch.uint8, device=self.device)
        device_bytes[:total].copy_(buffer.tensor[:total], non_blocking=True)
        if buffer.copied is not None:
            buffer.copied.record()
        return [device_bytes[offset:offset + a.nbytes].view(_TORCH_DTYPES[a.dtype]).view(a.shape)
                for a, offset in zip(arrays, offsets)]


class _Buffer:
    __slots__ = ("tensor", "array", "copied")

    def __init__(self, nbytes: int, on_cuda: bool):
        self._allocate(nbytes, on_cuda)
        self.copied = torch.cuda.Event() if on_cuda else None

    def _allocate(self, nbytes: int, pin: bool) -> None:
        self.tensor = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
        self.array = self.tensor.numpy()

    def wait_and_reserve(self, nbytes: int) -> None:
        # the copy that last read this buffer was queued steps ago: done, or nearly
        if self.copied is not None:
            self.copied.synchronize()
        if nbytes > self.tensor.numel():
            self._allocate(max(nbytes, 2 * self.tensor.numel()), self.copied is not None)
