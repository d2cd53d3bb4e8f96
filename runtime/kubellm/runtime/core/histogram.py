"""A cumulative histogram kept by the engine (token counts per step), read at scrape time
by the metrics layer, which lives elsewhere (another thread, later another process)."""
from __future__ import annotations

import bisect


class CumulativeHistogram:
    """Bucket counts for fixed upper bounds (+Inf last), a sum and a count."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def snapshot(self) -> tuple[tuple[float, ...], list[int], float]:
        """(bounds, cumulative counts per bound and +Inf, sum): Prometheus' form."""
        cumulative, total = [], 0
        for c in self.counts:
            total += c
            cumulative.append(total)
        return self.bounds, cumulative, self.sum
