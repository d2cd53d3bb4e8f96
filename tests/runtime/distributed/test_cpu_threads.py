"""CPU ranks of one node share its cores: torch's default of every core per process
oversubscribes a node running several ranks (a PP=2 step on 2 cores ran ~50x slower)."""
from __future__ import annotations

import os

import torch

from kubellm.runtime.parallel.state import share_cpu_cores


def test_ranks_split_the_cores_unless_told_otherwise():
    before = torch.get_num_threads()
    try:
        cores = os.cpu_count() or 1
        assert share_cpu_cores(torch.device("cpu"), 2, env={}) == max(1, cores // 2)
        assert torch.get_num_threads() == max(1, cores // 2)
        assert share_cpu_cores(torch.device("cpu"), 4 * cores, env={}) == 1
        torch.set_num_threads(before)
        assert share_cpu_cores(torch.device("cpu"), 2, env={"OMP_NUM_THREADS": "3"}) is None
        assert share_cpu_cores(torch.device("cuda"), 2, env={}) is None
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)
