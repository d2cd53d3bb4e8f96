"""Per-stage timing trace of the pipeline, to see micro-batches overlap across stages.

Set ``KUBELLM_PIPELINE_TRACE=<dir>``: every rank appends one JSON line per micro-batch
it computes to ``<dir>/rank<r>.jsonl`` — step, micro-batch, stage, TP rank and the
wall-clock start/end of its compute (all ranks of one node share the clock).
``overlaps`` finds the steps where stage s ran micro-batch m+1 while stage s+1 ran m.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from kubellm.runtime.distributed.layout import RankLayout

TRACE_ENV = "KUBELLM_PIPELINE_TRACE"


class StageTrace:
    def __init__(self, directory: str, layout: RankLayout):
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.layout = layout
        self._file = open(Path(directory) / f"rank{layout.rank}.jsonl", "a", buffering=1)

    @classmethod
    def from_environ(cls, layout: RankLayout) -> "StageTrace | None":
        directory = os.environ.get(TRACE_ENV)
        return cls(directory, layout) if directory else None

    def record(self, step: int, micro_batch: int, start: float, end: float) -> None:
        self._file.write(json.dumps({
            "rank": self.layout.rank, "stage": self.layout.pp_rank,
            "tp_rank": self.layout.tp_rank, "step": step, "micro_batch": micro_batch,
            "start": start, "end": end}) + "\n")

    def close(self) -> None:
        self._file.close()


def read_trace(directory: str) -> list[dict]:
    events = []
    for path in sorted(Path(directory).glob("rank*.jsonl")):
        events += [json.loads(line) for line in path.read_text().splitlines() if line]
    return events


def overlaps(events: list[dict]) -> list[dict]:
    """(step, stage, micro_batch) triples where TP rank 0 of ``stage`` computed
    micro-batch m+1 while ``stage + 1`` was still computing micro-batch m."""
    spans = {(e["step"], e["stage"], e["micro_batch"]): (e["start"], e["end"])
             for e in events if e["tp_rank"] == 0}
    found = []
    for (step, stage, m), (start, end) in spans.items():
        later = spans.get((step, stage + 1, m))
        if later is None or (step, stage, m + 1) not in spans:
            continue
        next_start, next_end = spans[(step, stage, m + 1)]
        if next_start < later[1] and later[0] < next_end:
            found.append({"step": step, "stage": stage, "micro_batch": m})
    return found


def timeline(events: list[dict], step: int, width: int = 72) -> str:
    """An ASCII chart of one step: one row per stage, digits = micro-batch index."""
    mine = [e for e in events if e["step"] == step and e["tp_rank"] == 0]
    if not mine:
        return ""
    t0 = min(e["start"] for e in mine)
    span = max(e["end"] for e in mine) - t0 or 1.0
    rows = {}
    for e in mine:
        row = rows.setdefault(e["stage"], [" "] * width)
        lo = int((e["start"] - t0) / span * (width - 1))
        hi = max(lo + 1, int((e["end"] - t0) / span * (width - 1)) + 1)
        for i in range(lo, min(hi, width)):
            row[i] = str(e["micro_batch"] % 10)
    return "\n".join(f"stage {s}: |{''.join(r)}|" for s, r in sorted(rows.items()))
