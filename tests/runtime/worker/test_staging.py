"""The pinned upload ring: every array comes back with its dtype, shape and values, at
any size (the buffers grow), through every buffer of the ring in turn. On CPU the ring
runs without pinning or events; the CUDA path is the same code plus those two."""
from __future__ import annotations

import numpy as np
import torch

from kubellm.runtime.worker.staging import PinnedStaging


def test_arrays_come_back_typed_and_intact_through_the_ring():
    staging = PinnedStaging(torch.device("cpu"), num_buffers=3, initial_bytes=64)
    rng = np.random.default_rng(0)
    kept = []
    for step in range(7):
        arrays = [rng.integers(-2**40, 2**40, size=step * 5 + 1, dtype=np.int64),
                  rng.integers(0, 2**31 - 1, size=(step + 1, 3), dtype=np.int32),  # odd bytes
                  np.zeros(0, np.int64),
                  rng.integers(0, 9, size=step * 40 + 3, dtype=np.int32),     # grows buffers
                  rng.standard_normal(5).astype(np.float32)]
        tensors = staging.upload(arrays)
        kept.append((arrays, tensors))
    # earlier steps' tensors are unaffected by the buffers' later reuse
    for arrays, tensors in kept:
        for a, t in zip(arrays, tensors):
            assert t.dtype == torch.from_numpy(a).dtype and tuple(t.shape) == a.shape
            assert np.array_equal(t.numpy(), a)


def test_every_array_starts_16_byte_aligned():
    # Triton specialises kernels on 16-byte pointer alignment: a view that is aligned or
    # not depending on the other arrays' sizes would compile a new variant mid-run
    staging = PinnedStaging(torch.device("cpu"))
    for sizes in [(1, 3, 5), (2, 7, 1), (0, 1, 9)]:
        arrays = [np.arange(n, dtype=dt) for n, dt in zip(sizes, (np.int64, np.int32, np.int32))]
        tensors = staging.upload(arrays)
        base = tensors[0].untyped_storage().data_ptr()
        for t in tensors:
            assert (t.data_ptr() - base) % 16 == 0
