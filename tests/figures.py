"""What a benchmark's smoke test may check of a measured figure: that it is one (a finite,
non-negative number), never how big it is — a loaded machine can be 100x slower than an
idle one, and a rounded rate of a slow run can be 0."""
from __future__ import annotations

import math


def is_figure(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)
