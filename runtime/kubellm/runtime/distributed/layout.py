"""Where each global rank sits in the TP x PP grid, and which layers each stage holds.

Ranks are laid out stage-major: rank = pp_rank * tp_size + tp_rank. A tensor-parallel
group is therefore a block of consecutive ranks, which keeps it inside one node when
each node runs ``tp_size`` processes (the operator's multi-node layout: one pod per
pipeline stage). Rank 0 — stage 0, TP rank 0 — is the driver.
"""
from __future__ import annotations

from dataclasses import dataclass

from kubellm.runtime.config import parse_partition
from kubellm.runtime.config_sources import ConfigError


@dataclass(frozen=True)
class RankLayout:
    rank: int
    tp_size: int
    pp_size: int
    local_rank: int = 0  # index of this process on its node: the CUDA device it uses

    def __post_init__(self):
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world of {self.world_size}")

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def pp_rank(self) -> int:
        return self.rank // self.tp_size

    @property
    def is_driver(self) -> bool:
        return self.rank == 0

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1

    def rank_of(self, pp_rank: int, tp_rank: int) -> int:
        return pp_rank * self.tp_size + tp_rank

    def tp_group_ranks(self, pp_rank: int) -> list[int]:
        return [self.rank_of(pp_rank, t) for t in range(self.tp_size)]

    @property
    def prev_stage_rank(self) -> int:
        """The rank of the previous stage with this TP rank: it sends our inputs."""
        return self.rank_of(self.pp_rank - 1, self.tp_rank)

    @property
    def next_stage_rank(self) -> int:
        return self.rank_of(self.pp_rank + 1, self.tp_rank)

    @property
    def last_stage_leader(self) -> int:
        """The rank that sends the last stage's logits to the driver."""
        return self.rank_of(self.pp_size - 1, 0)


def layer_partition(num_layers: int, pp_size: int, override: str | None = None
                    ) -> list[tuple[int, int]]:
    """[start, end) layer range per stage. Even split by default, the first
    ``num_layers % pp_size`` stages taking one layer more; ``override`` (EngineConfig
    ``pp_layer_partition``, e.g. "10,12,10") gives each stage's layer count."""
    if override:
        sizes = parse_partition(override, pp_size)
        if sum(sizes) != num_layers:
            raise ConfigError("pp_layer_partition", f"{override!r} adds up to {sum(sizes)} "
                                                    f"layers; the model has {num_layers}")
    else:
        if num_layers < pp_size:
            raise ConfigError("pipeline_parallel_size", f"{pp_size} stages for a model of "
                                                        f"only {num_layers} layers")
        base, extra = divmod(num_layers, pp_size)
        sizes = [base + (i < extra) for i in range(pp_size)]
    ranges, start = [], 0
    for size in sizes:
        ranges.append((start, start + size))
        start += size
    return ranges
